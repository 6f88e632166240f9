"""What ``scripts/setup.sh`` costs with uv against pip, each from a fresh clone and an empty cache.

uv (today's ``scripts/setup.sh``) unpacks each wheel once into its cache and compiles the bytecode
on every core; pip (the set-up before, its commands replayed here: ``pip install`` of torch's CPU
build, of the lock, then ``--no-deps -e .``, each compiling as it installs) did both one file at a
time. Each way runs in a new clone of this repository's HEAD with its own empty package cache
(``PIP_NO_CACHE_DIR=1``; ``UV_CACHE_DIR`` a new folder), so both download every package. Prints the
wall and CPU seconds (the set-up and everything it started) of each, and the ratio uv / pip.

    python benchmarks/setup_install.py [--minimal]

``--minimal``: scripts/setup-minimal.sh's .venv-min, beside a .venv that scripts/setup.sh set up
first (not timed) as CI does: uv then finds every wheel in its cache and takes .venv's bytecode.

Nothing here is asserted; the numbers go to results/reference/benchmarks/setup_install.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from test_commands import MEASURE  # benchmarks/test_commands.py: wall and CPU seconds of a child

REPO = Path(__file__).resolve().parents[1]
#: The set-up before uv, as scripts/setup.sh ran it with pip (``{venv}``: .venv or .venv-min).
PIP_SETUP = """
set -euo pipefail
[ -x {venv}/bin/python ] || python3 -m venv {venv}
{venv}/bin/python -m pip install --quiet --upgrade pip
torch_pin=$(grep -E '^torch==' requirements-cpu.txt)
{venv}/bin/python -m pip install --quiet "$torch_pin" 2>/dev/null \\
  || {venv}/bin/python -m pip install --quiet "$torch_pin" --extra-index-url https://download.pytorch.org/whl/cpu
if [ {venv} = .venv-min ]; then
  {venv}/bin/python -m pip install --quiet -c requirements-cpu.txt -e '.[test]'
else
  {venv}/bin/python -m pip install --quiet -r requirements-cpu.txt
  {venv}/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
fi
{venv}/bin/python -m pip check >/dev/null
"""


def measure(way: str, minimal: bool) -> dict:
    venv = ".venv-min" if minimal else ".venv"
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        env = dict(os.environ, PIP_NO_CACHE_DIR="1", UV_CACHE_DIR=str(Path(tmp) / "uv-cache"))
        if minimal:  # as CI sets it up: beside .venv, set up first (not timed) from the same cache
            subprocess.run(["bash", "scripts/setup.sh"], cwd=clone, env=env, check=True, capture_output=True)
        if way == "pip":
            command = ["bash", "-c", PIP_SETUP.format(venv=venv)]
        else:
            command = ["bash", "scripts/setup-minimal.sh" if minimal else "scripts/setup.sh"]
        proc = subprocess.run(
            [sys.executable, "-c", MEASURE, *command],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            cwd=clone,
        )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["rc"]:
        raise SystemExit(f"{way}: the set-up failed (exit {result['rc']})")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minimal", action="store_true", help="set up .venv-min (setup-minimal.sh)")
    args = parser.parse_args()
    what = "scripts/setup-minimal.sh" if args.minimal else "scripts/setup.sh"
    print(f"{what} from a fresh clone, empty package caches, {os.cpu_count()} cores; seconds")
    pip, uv = measure("pip", args.minimal), measure("uv", args.minimal)
    for name, r in (("pip (before)", pip), ("uv", uv)):
        print(f"  {name:<13} wall {r['wall']:7.1f}  CPU {r['cpu']:7.1f}")
    print(f"  uv / pip      wall {uv['wall'] / pip['wall']:7.2f}  CPU {uv['cpu'] / pip['cpu']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
