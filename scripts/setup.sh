#!/usr/bin/env bash
# Create .venv and install grpo-harness with its test tools at the exact versions of
# requirements-cpu.txt (CPU build of torch; regenerate the lock with `bash scripts/lock.sh`).
# Usage: bash scripts/setup.sh        (re-running it is cheap: pip skips what is installed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# Every package at its locked version (torch's CPU build among them, so nothing pulls a CUDA build),
# then the project itself without letting pip resolve anything anew.
# torch's CPU build first: from the configured indexes, else from PyTorch's own CPU index (PyPI has
# no +cpu builds).
torch_pin=$(grep -E '^torch==' requirements-cpu.txt)
.venv/bin/python -m pip install --quiet "$torch_pin" 2>/dev/null \
  || .venv/bin/python -m pip install --quiet "$torch_pin" --extra-index-url https://download.pytorch.org/whl/cpu
.venv/bin/python -m pip install --quiet -r requirements-cpu.txt
.venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
.venv/bin/python -m pip check >/dev/null || { .venv/bin/python -m pip check >&2; exit 1; }
echo "set up: $(.venv/bin/python -c 'import torch, trl, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")')"
