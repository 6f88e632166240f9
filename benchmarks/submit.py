"""Plan, validate and submit a 1,000-run grid to SLURM (held jobs, then cancelled), start-up included.

Times the whole CLI (`python -m harness submit GRID --hold`, a fresh process: imports, YAML, expansion,
TRL's GRPOConfig for every cell, the rule table, the code snapshot, one sbatch, 1,000 job records),
and, side by side in the same run, submitit submitting a held array of 1,000 trivial callables from
an already warm process: the floor set by submitit and sbatch alone. Target: <= 5 s on 2 cores.

    python benchmarks/submit.py [--runs 1000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _noop(i: int) -> int:
    return i


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from harness import slurm

    reason = slurm.slurm_available()
    if reason:
        print(f"no SLURM cluster reachable: {reason} (start one: bash scripts/slurm-cluster.sh up)")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="submit-bench-"))
    grid = tmp / "big.yaml"
    grid.write_text(
        f"include: {REPO}/ablations/base.yaml\nname: big\n"
        "executor: {name: slurm, timeout_min: 10}\n"
        f"grid:\n  loss_type: [grpo, dapo, vespo, bnpo]\n  seed: {list(range(args.runs // 4))}\n"
    )
    cmd = [sys.executable, "-m", "harness", "submit", str(grid), "--results", str(tmp / "results"), "--hold"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    harness_s = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        return 1
    submitted = [line for line in proc.stdout.splitlines() if line.startswith("submitted array job")]
    subprocess.run(
        [sys.executable, "-m", "harness", "cancel", str(tmp / "results" / "big")], cwd=REPO, check=True
    )

    import submitit

    ex = submitit.AutoExecutor(folder=tmp / "floor" / "%j", cluster="slurm")
    ex.update_parameters(timeout_min=10, slurm_additional_parameters={"hold": True})
    t0 = time.perf_counter()
    jobs = ex.map_array(_noop, range(args.runs))
    floor_s = time.perf_counter() - t0
    subprocess.run(["scancel", jobs[0].job_id.split("_")[0]], check=True)

    print(
        f"grpo-harness submit, {args.runs} runs (fresh process, validation and snapshot included): {harness_s:.2f} s"
    )
    print(f"  {'; '.join(submitted)}")
    print(f"submitit map_array of {args.runs} held no-op tasks (warm process): {floor_s:.2f} s")
    print(
        f"ratio: {harness_s / floor_s:.1f}x the submitit floor; target <= 5 s: {'met' if harness_s <= 5 else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
