#!/usr/bin/env bash
# Regenerate requirements-cpu.txt, the lock of exact versions that scripts/setup.sh and CI install.
# Usage: bash scripts/lock.sh          (about 20 s; needs the package index, nothing else)
#        LOCK_UPGRADE=1 bash scripts/lock.sh   (re-resolve every pin to the newest the ranges admit)
#
# Without LOCK_UPGRADE the pins already in requirements-cpu.txt are kept and only what is new is
# resolved (a new extra, a new range), so adding a package does not move torch, transformers or TRL
# under the numbers measured with them.
#
# pip-compile (pip-tools) resolves pyproject.toml's ranges, its extras and constraints-cpu.txt
# (the CPU build of torch) into one pinned list, in a throwaway virtual environment so .venv is left
# alone. Commit the result with the README numbers it was measured with: a new lock can move them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
"$PY" -m venv "$tool"
"$tool/bin/python" -m pip install --quiet "pip-tools>=7.4,<8"
# pip-compile reads pip's configuration: where torch's CPU build is not on the configured indexes,
# run with PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu (the lock records no index).
out="$tool/requirements-cpu.txt"
cp requirements-cpu.txt "$out"
upgrade=$([ "${LOCK_UPGRADE:-0}" = 1 ] && echo --upgrade || true)
CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh" "$tool/bin/pip-compile" --quiet $upgrade \
  --extra test --extra peft --extra trackers --extra deepspeed --extra docs --strip-extras --allow-unsafe \
  --no-emit-find-links --no-emit-index-url --no-emit-trusted-host \
  --constraint constraints-cpu.txt --output-file "$out" pyproject.toml
if grep -qiE '^(nvidia-|triton==)' "$out" || ! grep -q '^torch==.*+cpu$' "$out"; then
  echo "lock: the resolution holds no CPU build of torch or CUDA packages; requirements-cpu.txt is unchanged" >&2
  exit 1
fi
sed -i "s|$out|requirements-cpu.txt|" "$out"
mv "$out" requirements-cpu.txt
echo "wrote requirements-cpu.txt ($(grep -c '==' requirements-cpu.txt) pins)"
