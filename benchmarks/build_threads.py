"""The embedded testbed's build on one core against every core the process may use.

Builds ``tiny-steps`` (the findings grid's task and model spec, ``--sft-steps`` warm-start steps) into
a temporary folder twice, in fresh processes, once with the process limited to one core and once with
every core it may use; both builds run ``harness.models.tiny.BUILD_THREADS`` torch threads. Prints each
build's seconds, the ratio, and whether the two ``model.safetensors`` are the same bit for bit (exit
status 1 when they are not).

    python benchmarks/build_threads.py [--sft-steps 300]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD = """
import json, sys
from harness.config.spec import load_grid
from harness.config.grid import expand
from harness.models.tiny_steps import build_tiny_steps_model
run = expand(load_grid("ablations/findings.yaml", overrides=[f"tiny_steps.sft_steps={sys.argv[2]}"])).runs[0]
info = build_tiny_steps_model(run.tiny, run.task, sys.argv[1])
print(json.dumps({"seconds": info["build_seconds"], "threads": info["sft_threads"]}))
"""


def build(out: Path, steps: int, cores: set[int] | None) -> dict:
    pre = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    proc = subprocess.run(
        [sys.executable, "-c", BUILD, str(out), str(steps)],
        capture_output=True, text=True, check=True, preexec_fn=pre,
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-steps", type=int, default=300)
    args = ap.parse_args()
    first = min(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        one = build(Path(tmp) / "one", args.sft_steps, {first})
        every = build(Path(tmp) / "every", args.sft_steps, None)
        same = filecmp.cmp(
            Path(tmp) / "one" / "model.safetensors", Path(tmp) / "every" / "model.safetensors", shallow=False
        )
    print(f"tiny-steps build, {args.sft_steps} SFT steps")
    cores = len(os.sched_getaffinity(0))
    print(f"  1 core:    {one['seconds']:.1f} s  ({one['threads']} threads)")
    print(
        f"  {cores} cores:   {every['seconds']:.1f} s  ({every['threads']} threads)"
        f"   ratio {every['seconds'] / one['seconds']:.2f}"
    )
    print(f"  weights the same bit for bit: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
