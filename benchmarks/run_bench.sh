#!/usr/bin/env bash
# Run both loss micro-benchmarks with the full set of reported shapes.
#
#   benchmarks/run_bench.sh [cpu|cuda|auto] [extra flags for `python -m harness.bench ...`]
#
# Tables are printed and written to results/bench/<device>/{vespo,losses}.{md,csv}.
# On a CPU host shared with other jobs, also run with `--threads 1`: multi-threaded ops on a fully
# loaded host wait for scheduler time slices, which can dominate the timings.
set -euo pipefail

device="${1:-auto}"
shift || true
cd "$(dirname "$0")/.."

python -m harness.bench vespo --full --device "$device" "$@"
python -m harness.bench losses --full --device "$device" "$@"
