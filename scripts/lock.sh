#!/usr/bin/env bash
# Regenerate requirements-cpu.txt, the lock of exact versions that scripts/setup.sh and CI install.
# Usage: bash scripts/lock.sh          (about 20 s; needs the package index, nothing else)
#
# pip-compile (pip-tools) resolves pyproject.toml's ranges, the test extra and constraints-cpu.txt
# (the CPU build of torch) into one pinned list, in a throwaway virtual environment so .venv is left
# alone. Commit the result with the README numbers it was measured with: a new lock can move them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
"$PY" -m venv "$tool"
"$tool/bin/python" -m pip install --quiet "pip-tools>=7.4,<8"
CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh" "$tool/bin/pip-compile" --quiet --upgrade \
  --extra test --strip-extras --allow-unsafe \
  --no-emit-find-links --no-emit-index-url --no-emit-trusted-host \
  --constraint constraints-cpu.txt --output-file requirements-cpu.txt pyproject.toml
if grep -qiE '^(nvidia-|triton==)' requirements-cpu.txt || ! grep -q '^torch==.*+cpu$' requirements-cpu.txt; then
  echo "lock: requirements-cpu.txt must hold torch's CPU build and no CUDA packages" >&2
  exit 1
fi
echo "wrote requirements-cpu.txt ($(grep -c '==' requirements-cpu.txt) pins)"
