#!/usr/bin/env bash
# Create .venv-min: grpo-harness with its test tools only (no peft, trackers, deepspeed or docs
# extras), at the lock's versions, where the tests that run only without an optional package run.
# Usage: bash scripts/setup-minimal.sh && .venv-min/bin/python -m pytest -q -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv-min/bin/python ] || "$PY" -m venv .venv-min
.venv-min/bin/python -m pip install --quiet --upgrade pip
torch_pin=$(grep -E '^torch==' requirements-cpu.txt)
.venv-min/bin/python -m pip install --quiet "$torch_pin" 2>/dev/null \
  || .venv-min/bin/python -m pip install --quiet "$torch_pin" --extra-index-url https://download.pytorch.org/whl/cpu
# the lock as constraints: only what the package and its test extra need, at the locked versions
.venv-min/bin/python -m pip install --quiet -c requirements-cpu.txt -e '.[test]'
.venv-min/bin/python -m pip check >/dev/null || { .venv-min/bin/python -m pip check >&2; exit 1; }
