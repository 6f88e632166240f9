#!/usr/bin/env bash
# The GPU check: one prepared script, under 8 minutes on one NVIDIA H200, no network.
#
#   1. `grpo-harness bench vespo --device cuda --full`: TRL's VESPO gamma weights against the official
#      algorithm (equivalence checked first), beside the 1.19-1.25x reported in TRL pull request #5199;
#   2. a random model with Qwen2.5-0.5B's shapes and the tiny-chat tokenizer (benchmarks/gpu_check.py),
#      trained through `grpo-harness run ablations/smoke.yaml --profile paper` (bf16, cuda, 16 per device
#      x gradient accumulation 4, completions up to 256 tokens, num_iterations 2) for grpo, dapo and
#      vespo, STEPS optimizer steps each (10), one run at a time: s/step, tokens/s, peak GPU memory and
#      w_seq per step;
#   3. the tables (markdown + CSV, device and versions in each) into OUT.
#
# On a GPU machine with the harness installed: `bash benchmarks/gpu_check.sh --device cuda`. On an
# offline node whose image has torch, transformers and accelerate only, once `bash
# benchmarks/gpu_wheels.sh` has filled .whl/ on a machine with network (TRL, datasets, reasoning-gym and
# the rest, about 12 MiB), copy the checkout with .whl/ there and run from its root (one line):
#
#   set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; bash benchmarks/gpu_check.sh --device cuda --out gpu-tables 2>&1 | tee gpu_check.log
#
# then copy gpu-tables/* into results/reference/gpu/ (its README has the time estimate; if the
# runs do not fit the budget, rerun with --steps 6). On a machine's CPUs, at tiny sizes (a 2-layer model
# of the same family, 4 steps, 8 completions of up to 48 tokens, the short bench):
#
#   bash benchmarks/gpu_check.sh --device cpu --out /tmp/gpu-check     # a couple of minutes
#
# Options: --device cuda|cpu (cuda), --out DIR (cuda: results/reference/gpu; cpu: $GPU_CHECK_OUT or
# results/gpu_check-cpu), --work DIR (a new temporary folder), --steps N (cuda 10, cpu 4),
# --budget SECONDS (cuda 400, cpu 600: each stage's timeout is cut to what is left of it). Exit status:
# 0 when every stage ran and the tables pass their check (s/step > 0, w_seq away from 1 on an off-policy
# step of each run); 2 on a bad option.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
device=cuda
out=""
work=""
steps=""
budget=""
while (($#)); do
  case "$1" in
  --device) device="$2"; shift 2 ;;
  --out) out="$2"; shift 2 ;;
  --work) work="$2"; shift 2 ;;
  --steps) steps="$2"; shift 2 ;;
  --budget) budget="$2"; shift 2 ;;
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$device" in
cuda) out="${out:-$repo/results/reference/gpu}"; steps="${steps:-10}"; budget="${budget:-400}" ;;
cpu) out="${out:-${GPU_CHECK_OUT:-$repo/results/gpu_check-cpu}}"; steps="${steps:-4}"; budget="${budget:-600}" ;;
*) echo "gpu_check: --device must be cuda or cpu, got $device" >&2; exit 2 ;;
esac
work="${work:-$(mktemp -d -t gpu-check.XXXXXX)}"
mkdir -p "$work" "$out"
out="$(cd "$out" && pwd)"
work="$(cd "$work" && pwd)"

if [[ -n "${PYTHON:-}" ]]; then
  python="$PYTHON"
elif [[ -x "$repo/.venv/bin/python" ]]; then
  python="$repo/.venv/bin/python"
else
  python=python3
fi
export PYTHONPATH="$work/site:$repo${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export GRPO_HARNESS_CACHE="$work/cache" TOKENIZERS_PARALLELISM=false
cd "$repo"
start=$SECONDS

# stage NAME LIMIT_S COMMAND...: print it, run it under a timeout cut to the budget left, and return
# its status (124 or 137 when it ran out of time).
stage() {
  local name="$1" limit="$2" left
  shift 2
  left=$((budget - (SECONDS - start)))
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    echo "=== $name: no time left of the ${budget}s budget" >&2
    return 124
  fi
  echo "=== $name (timeout ${limit}s, at $((SECONDS - start))s)"
  echo "+ $*"
  local status=0
  timeout -k 20 "$limit" "$@" || status=$?
  echo "=== $name: exit $status after $((SECONDS - start))s"
  return "$status"
}

# pycosat (imported by reasoning-gym's logic puzzles, not by chain_sum) has no wheel for Linux: build it
# from the sdist that gpu_wheels.sh saved; where that fails, a stand-in says why on first use.
ensure_pycosat() {
  "$python" -c "import pycosat" 2>/dev/null && return 0
  mkdir -p "$work/site"
  local sdist
  sdist="$(ls .whl/pycosat-*.tar.gz 2>/dev/null | head -n 1 || true)"
  if [[ -n "$sdist" ]] && timeout 120 "$python" -m pip install -q --no-index --no-deps --no-build-isolation \
    --no-cache-dir --target "$work/site" "$sdist"; then
    return 0
  fi
  echo "warning: pycosat could not be built; a stand-in raises ImportError on first use" >&2
  printf '%s\n' '"""Stand-in from benchmarks/gpu_check.sh: pycosat could not be built here."""' '' \
    'def __getattr__(name):' \
    '    raise ImportError("pycosat could not be built on this machine (see the gpu_check log)")' \
    >"$work/site/pycosat.py"
}

# The versions and the GPU, and every module the runs import (so that a missing wheel fails here).
read -r -d '' environment_py <<'PY' || true
import platform
from importlib.metadata import version

import torch

names = ("torch", "transformers", "trl", "accelerate", "datasets", "reasoning-gym", "pyarrow", "pandas")
print(f"python {platform.python_version()}: " + ", ".join(f"{n} {version(n)}" for n in names))
if torch.cuda.is_available():
    print(f"GPU: {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, bf16 {torch.cuda.is_bf16_supported()}")
import harness.cli, harness.train.trainer, harness.train.training, reasoning_gym, submitit  # noqa: E401, F401

print("imports: ok")
PY

if [[ "$device" == cuda ]]; then
  bench_args=(--full)
  model_size=qwen2.5-0.5b
  shapes=(-o executor.threads_per_run=4 -o executor.max_parallel=1)
else
  bench_args=(--sizes 8x128,32x512 --repeats 3 --min-run-time 0.05 --max-time 0.5 --threads 1)
  model_size=small
  shapes=(-o harness.device=cpu -o trainer.bf16=false -o trainer.per_device_train_batch_size=4
    -o trainer.gradient_accumulation_steps=2 -o trainer.num_generations=4
    -o trainer.max_completion_length=48 -o executor.threads_per_run=1 -o executor.max_parallel=2)
fi

echo "gpu_check: device $device, $steps steps per loss type, budget ${budget}s"
echo "gpu_check: tables -> $out, work folder $work"
echo "gpu_check: commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
[[ "$device" == cuda ]] && { nvidia-smi -L || true; }
ensure_pycosat
printf '%s\n' "$environment_py" >"$work/environment.py"
stage environment 120 "$python" "$work/environment.py"

# 1. The VESPO benchmark; exit status 1 when TRL and the reference disagree (nothing is timed then).
stage "bench vespo" 150 "$python" -m harness bench vespo --device "$device" "${bench_args[@]}" --out "$work/bench"
bench_dir="$(dirname "$(ls "$work"/bench/*/vespo.md | head -n 1)")"

# 2. The model: random weights, Qwen2.5-0.5B's shapes, tiny-chat's tokenizer.
stage "build model" 240 "$python" benchmarks/gpu_check.py model --size "$model_size" --device "$device" \
  --out "$work/model" --cache "$work/cache"

# 3. Three loss types through the harness at the paper profile's batch shapes. The bare template: a
# random model never writes chat's <answer> tags, so every chat reward would be 0 and nothing would move;
# the bare answer's partial credit differs between completions. No eval, no checkpoints.
train_status=0
stage "grpo-harness run" 300 "$python" -m harness run ablations/smoke.yaml --profile paper \
  --results "$work/results" --executor local --no-report --progress-every 15 \
  -o "model=$work/model" -o "grid.seed=[0]" -o "trainer.max_steps=$steps" -o task.template=bare \
  -o task.kwargs.max_digits=1 -o harness.eval_steps=0 -o harness.checkpoint_steps=0 \
  -o harness.samples_steps=0 -o harness.flush_every=1 "${shapes[@]}" || train_status=$?

# 4. The tables, from whatever steps were recorded (also after a timeout), then their check.
budget=$((budget + 60)) # the tables always get their minute
stage tables 60 "$python" benchmarks/gpu_check.py tables --results "$work/results/smoke" \
  --bench "$bench_dir" --model "$work/model" --out "$out"
if ((train_status != 0)); then
  echo "gpu_check: grpo-harness run exited $train_status; the tables hold the steps it recorded" >&2
  exit 1
fi
echo "gpu_check: done in $((SECONDS - start))s; tables in $out"
