"""Plan, validate and submit a 1,000-run grid to SLURM (held jobs, then cancelled), start-up included.

Times the whole CLI (`python -m harness submit GRID --hold`, a fresh process: imports, YAML, expansion,
TRL's GRPOConfig verdict for every cell, the rule table, the code snapshot, one sbatch, 1,000 job
records) twice:

- cold: an empty verdict memo (harness.verdicts), so TRL, torch and reasoning-gym are imported and
  asked, as on the first validation after installing or upgrading them;
- warm: the memo holds the answers for these settings (as after `grpo-harness plan`, or any earlier
  plan or submit with the same trainer settings); nothing heavy is imported.

Side by side in the same run: submitit submitting a held array of 1,000 trivial callables from an
already warm process, the floor set by submitit and sbatch alone. Target: <= 5 s on 2 cores.

    python benchmarks/submit.py [--runs 1000]
"""

from __future__ import annotations

import argparse
import os
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
    from harness.cluster import slurm

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
    env = {**os.environ, "GRPO_HARNESS_VERDICTS": str(tmp / "verdicts")}

    def submit(results: Path) -> tuple[float, str]:
        cmd = [sys.executable, "-m", "harness", "submit", str(grid), "--results", str(results), "--hold"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(
                f"submit failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        subprocess.run(
            [sys.executable, "-m", "harness", "cancel", str(results / "big")], cwd=REPO, check=True
        )
        arrays = [line for line in proc.stdout.splitlines() if line.startswith("submitted array job")]
        return seconds, "; ".join(arrays)

    cold_s, cold_arrays = submit(tmp / "results-cold")
    warm_s, warm_arrays = submit(tmp / "results-warm")

    import submitit

    ex = submitit.AutoExecutor(folder=tmp / "floor" / "%j", cluster="slurm")
    ex.update_parameters(timeout_min=10, slurm_additional_parameters={"hold": True})
    t0 = time.perf_counter()
    jobs = ex.map_array(_noop, range(args.runs))
    floor_s = time.perf_counter() - t0
    subprocess.run(["scancel", jobs[0].job_id.split("_")[0]], check=True)

    print(f"grpo-harness submit, {args.runs} runs, fresh process, validation and snapshot included:")
    print(f"  cold verdict memo (TRL, torch, reasoning-gym imported): {cold_s:.2f} s  [{cold_arrays}]")
    print(f"  warm verdict memo (nothing heavy imported):            {warm_s:.2f} s  [{warm_arrays}]")
    print(f"submitit map_array of {args.runs} held no-op tasks (warm process): {floor_s:.2f} s")
    print(
        f"ratio warm/floor: {warm_s / floor_s:.1f}x; target <= 5 s: warm {'met' if warm_s <= 5 else 'NOT met'}, "
        f"cold {'met' if cold_s <= 5 else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
