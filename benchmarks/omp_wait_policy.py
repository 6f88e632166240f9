"""OpenMP's wait policy for the test suite's processes, where more torch threads than free cores run.

The suite runs two test processes on 2 cores, and a model build (``BUILD_THREADS`` torch threads) or
a two-process run in one of them shares the cores with the other. By default OpenMP's threads spin
while they wait for each other; with ``OMP_WAIT_POLICY=PASSIVE`` (``tests/conftest.py`` sets it) they
sleep. Builds ``tiny-steps`` (the findings grid's spec, ``--sft-steps`` warm-start steps) in fresh
processes under each policy, alone and beside one process that keeps a core busy, and prints each
build's wall and CPU seconds and the ratio PASSIVE / default. The wait policy changes no result.

    python benchmarks/omp_wait_policy.py [--sft-steps 40]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD = """
import json, resource, sys, time
from harness.config.spec import load_grid
from harness.config.grid import expand
from harness.models.tiny_steps import build_tiny_steps_model
run = expand(load_grid("ablations/findings.yaml", overrides=[f"tiny_steps.sft_steps={sys.argv[2]}"])).runs[0]
t = time.monotonic()
build_tiny_steps_model(run.tiny, run.task, sys.argv[1])
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.monotonic() - t, "cpu": r.ru_utime + r.ru_stime}))
"""

REPO = Path(__file__).resolve().parents[1]


def build(steps: int, policy: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-c", BUILD, str(Path(tmp) / "m"), str(steps)],
            capture_output=True, text=True, check=True, env=env, cwd=REPO,
        )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sft-steps", type=int, default=40)
    args = parser.parse_args()
    print(
        f"tiny-steps build, {args.sft_steps} SFT steps, {os.cpu_count()} cores; seconds (wall, CPU incl. data)"
    )
    for beside in (False, True):
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if beside else None
        try:
            default, passive = build(args.sft_steps, None), build(args.sft_steps, "PASSIVE")
        finally:
            if hog:
                hog.kill()
        where = "beside a busy process" if beside else "alone"
        print(
            f"{where:22s} default wall {default['wall']:6.1f} cpu {default['cpu']:6.1f} | PASSIVE wall "
            f"{passive['wall']:6.1f} cpu {passive['cpu']:6.1f} | ratio wall {passive['wall'] / default['wall']:.2f} "
            f"cpu {passive['cpu'] / default['cpu']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
