#!/usr/bin/env bash
# Create .venv and install grpo-harness with its test tools (CPU build of torch).
# Usage: bash scripts/setup.sh        (re-running it is cheap: pip skips what is installed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned to the CPU build, so nothing pulls a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet -c constraints-cpu.txt torch
.venv/bin/python -m pip install --quiet -c constraints-cpu.txt -e '.[test]'
echo "set up: $(.venv/bin/python -c 'import torch, trl; print(f"torch {torch.__version__}, trl {trl.__version__}")')"
