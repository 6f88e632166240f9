#!/usr/bin/env bash
# Create .venv and install grpo-harness with its test tools at the exact versions of
# requirements-cpu.txt (CPU build of torch; regenerate the lock with `bash scripts/lock.sh`).
# Usage: bash scripts/setup.sh        (re-running it is cheap: what is installed is skipped)
#
# With SETUP_MINIMAL=1 (scripts/setup-minimal.sh): .venv-min instead, holding the package and its
# test extra only (no peft, trackers, deepspeed or docs), the lock as constraints.
#
# uv installs: it unpacks each wheel once into its cache and compiles the bytecode on every core,
# where pip did both one file at a time (benchmarks/setup_install.py: the ratio, measured). It
# installs from PyPI and from pip's configured find-links and index (pip's configuration is read
# once here and handed on), or, where torch's CPU build is on neither, from PyTorch's CPU index.
# Each step says what it does, and every 20 s that it lasts, how long it has taken.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
UV_PIN=uv==0.13.9
if [ "${SETUP_MINIMAL:-0}" = 1 ]; then venv=.venv-min; else venv=.venv; fi
start=$(date +%s)

# step WHAT COMMAND...: say WHAT, run COMMAND, and say WHAT again with the seconds taken every 20 s
# that it runs; returns COMMAND's status
step() {
  local what="$1" t0 beat status=0
  shift
  t0=$(date +%s)
  echo "setup $venv: $what (at $((t0 - start)) s)"
  (while sleep 20; do echo "setup $venv: $what ... $(($(date +%s) - t0)) s"; done) &
  beat=$!
  "$@" || status=$?
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  return "$status"
}

[ -x "$venv/bin/python" ] || step "creating the virtual environment" "$PY" -m venv "$venv"
# (pip's configured local indexes hold no uv: its notes that they were passed over are left out)
step "installing $UV_PIN with pip" \
  "$venv/bin/python" -m pip install --quiet "$UV_PIN" 2> >(grep -v "is ignored: it is neither a file" >&2)

# pip's configuration, which uv does not read: its find-links and its index, where set
sources=()
for link in $("$venv/bin/python" -m pip config get global.find-links 2>/dev/null || true); do
  sources+=(--find-links "$link")
done
index=$("$venv/bin/python" -m pip config get global.index-url 2>/dev/null || true)
[ -z "$index" ] || sources+=(--index-url "$index")

# Bytecode: compiled on every core as uv installs; for .venv-min beside .venv, whose files uv
# linked from the same cache, taken from .venv instead (scripts/share_bytecode.py), the rest compiled.
compile=(--compile-bytecode)
[ "$venv" = .venv-min ] && [ -d .venv/lib ] && compile=()
install() {
  "$venv/bin/python" -m uv pip install --python "$venv/bin/python" --quiet \
    ${sources[@]+"${sources[@]}"} ${compile[@]+"${compile[@]}"} "$@"
}
# torch's CPU build first: from the configured sources, else from PyTorch's own CPU index (PyPI has
# no +cpu builds)
torch_pin=$(grep -E '^torch==' requirements-cpu.txt)
step "installing $torch_pin" install "$torch_pin" 2>/dev/null \
  || step "installing $torch_pin from PyTorch's CPU index" install "$torch_pin" \
    --extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match
if [ "$venv" = .venv-min ]; then
  # the lock as constraints: only what the package and its test extra need, at the locked versions
  step "installing grpo-harness[test] at the lock's versions" install -c requirements-cpu.txt -e '.[test]'
  [ ${#compile[@]} -gt 0 ] \
    || step "taking .venv's bytecode" "$venv/bin/python" scripts/share_bytecode.py .venv "$venv"
else
  # every package at its locked version, then the project itself without resolving anything anew
  step "installing the lock's $(grep -c '==' requirements-cpu.txt) packages (requirements-cpu.txt)" \
    install -r requirements-cpu.txt
  step "installing grpo-harness (editable)" install --no-deps --no-build-isolation -e .
fi
"$venv/bin/python" -m uv pip check --python "$venv/bin/python" --quiet >/dev/null \
  || { "$venv/bin/python" -m uv pip check --python "$venv/bin/python" >&2; exit 1; }
echo "set up $venv in $(($(date +%s) - start)) s: $("$venv/bin/python" -c 'import torch, trl, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}")')"
