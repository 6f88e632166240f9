"""What the tests' command lines cost with and without the test session's preloaded interpreter.

Each test process forks ``grpo-harness ...`` (``tests/helpers.py``: ``cli``, ``module_command``) from
one interpreter that imported torch, transformers, TRL, reasoning-gym, the CLI and the report once;
a ``run`` so started forks its runs there too. ``GRPO_HARNESS_NO_PRELOAD=1`` starts every command's
Python anew, as before. Runs the same test files both ways, one test process each (``-n 0``), and
prints their wall seconds, CPU seconds (the test process and everything it started: the
preloaded interpreter and its children are its children) and the ratio with / without.

    python benchmarks/test_commands.py [TEST_FILE ...]    # default: test_validate.py test_e2e.py

Two files of CLI calls: validation errors (a command that imports, validates and exits) and
end-to-end grids. Nothing here is asserted; the numbers go to
results/reference/benchmarks/test_commands.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Runs pytest in a child and prints its wall and CPU seconds (itself and all it started and waited
#: for: getrusage's RUSAGE_CHILDREN once it has ended).
MEASURE = """
import json, resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "wall": time.monotonic() - t, "cpu": r.ru_utime + r.ru_stime}))
"""


def measure(files: list[str], preload: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GRPO_HARNESS_NO_PRELOAD"}
    if not preload:
        env["GRPO_HARNESS_NO_PRELOAD"] = "1"
    pytest = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *files]
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, *pytest],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=REPO,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", default=["tests/test_validate.py", "tests/test_e2e.py"])
    args = parser.parse_args()
    print(f"pytest -n 0 {' '.join(args.files)}, {os.cpu_count()} cores; seconds")
    print(f"{'':26s}{'wall':>8s}{'CPU':>8s}  exit")
    got = {}
    for preload in (False, True):
        got[preload] = m = measure(args.files, preload)
        name = "preloaded interpreter" if preload else "each command anew"
        print(f"{name:26s}{m['wall']:8.1f}{m['cpu']:8.1f}  {m['rc']}")
    wall, cpu = (got[True][k] / got[False][k] for k in ("wall", "cpu"))
    print(f"{'ratio preloaded / anew':26s}{wall:8.2f}{cpu:8.2f}")
    return 0 if got[True]["rc"] == got[False]["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
