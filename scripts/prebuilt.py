"""The embedded models shipped built (harness/models/prebuilt/): list, make and check them.

    python scripts/prebuilt.py list            # the shipped grids' keys at this machine's versions
    python scripts/prebuilt.py make [--from CACHE_DIR]
                                               # build each key (or take it from a model cache
                                               # that has it) and ship it; stale folders removed
    python scripts/prebuilt.py check [KEY ...] # rebuild each shipped key in a temporary folder
                                               # and compare it file by file with the shipped one

The shipped grids are SHIPPED_GRIDS: the quick start's (ablations/findings.yaml), DAPO's table
(ablations/dapo.yaml, on the same testbed) and the first look's (ablations/smoke.yaml). ``make`` must run with the
lock's versions (bash scripts/setup.sh), since they are part of each key.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.config.grid import expand  # noqa: E402
from harness.config.spec import load_grid  # noqa: E402
from harness.models import prebuilt  # noqa: E402
from harness.models.names import embedded_build  # noqa: E402

SHIPPED_GRIDS = ("ablations/findings.yaml", "ablations/dapo.yaml", "ablations/smoke.yaml")
#: files a build writes whose content is not a function of the key: the build's wall time
TIMED_FILE = "tiny_model.json"
TIMED_FIELDS = ("build_seconds",)


def wanted() -> dict[str, tuple[str, object, int]]:
    """``{key: (grid, build, warm-start steps)}`` over the embedded models the runs of SHIPPED_GRIDS
    train."""
    out: dict[str, tuple[str, object, int]] = {}
    for grid in SHIPPED_GRIDS:
        for run in expand(load_grid(ROOT / grid)).runs:
            if run.model in ("tiny", "tiny-chat", "tiny-steps"):
                key, build = embedded_build(run.model, run.task, run.tiny)
                out.setdefault(key, (grid, build, run.tiny.sft_steps))
    return out


def trajectory(build) -> dict:
    """The build's weights at prebuilt.TRAJECTORY_STEP, built in a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        return prebuilt.trajectory_at(build, Path(tmp) / "model")


def differences(a: Path, b: Path) -> list[str]:
    """The files of two model folders that differ (the build's wall time aside), as lines."""
    out = []
    names = {p.name for p in a.iterdir()} | {p.name for p in b.iterdir()}
    for name in sorted(names - {prebuilt.ORIGIN_FILE}):
        fa, fb = a / name, b / name
        if not (fa.is_file() and fb.is_file()):
            out.append(f"{name}: only in {'the first' if fa.is_file() else 'the second'}")
        elif name == TIMED_FILE:
            ja, jb = (json.loads(f.read_text()) for f in (fa, fb))
            for field in TIMED_FIELDS:
                ja.pop(field, None), jb.pop(field, None)
            if ja != jb:
                out.append(f"{name}: {sorted(k for k in ja.keys() | jb.keys() if ja.get(k) != jb.get(k))}")
        elif fa.read_bytes() != fb.read_bytes():
            out.append(f"{name}: differs")
    return out


def make(source_cache: Path | None) -> int:
    keys = wanted()
    prebuilt.PREBUILT_DIR.mkdir(exist_ok=True)
    for stale in set(prebuilt.shipped_keys()) - set(keys):
        shutil.rmtree(prebuilt.PREBUILT_DIR / stale)
        print(f"removed {stale} (no shipped grid uses it)")
    for key, (grid, build, _) in keys.items():
        dest = prebuilt.PREBUILT_DIR / key
        if (dest / prebuilt.ORIGIN_FILE).is_file():
            origin = prebuilt.read_origin(dest)
            if "trajectory" not in origin:  # shipped before trajectories were recorded
                if origin["cpu"] != prebuilt.cpu_signature():
                    print(f"{key}: built on another CPU; its trajectory is recorded where it was built")
                    continue
                prebuilt.write_origin(dest, key, origin["command"], origin["cpu"], trajectory(build))
                print(f"{key} ({grid}): shipped already; its trajectory recorded")
            else:
                print(f"{key} ({grid}): shipped already")
            continue
        cached = source_cache / key if source_cache else None
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "model"
            cpu = None
            if cached is not None and cached.is_dir():
                shutil.copytree(cached, folder)
                how = f"copied from {cached} (built on this machine, or as its {prebuilt.ORIGIN_FILE} says)"
                if (folder / prebuilt.ORIGIN_FILE).is_file():  # itself a shipped copy: keep its CPU
                    cpu = prebuilt.read_origin(folder)["cpu"]
            else:
                build(folder)
                how = "built"
            command = "python scripts/prebuilt.py make"
            same_cpu = cpu is None or cpu == prebuilt.cpu_signature()
            prebuilt.write_origin(folder, key, command, cpu, trajectory(build) if same_cpu else None)
            shutil.copytree(folder, dest)
        print(f"{key} ({grid}): {how}, shipped in {dest.relative_to(ROOT)}")
    return 0


def check(keys: list[str]) -> int:
    known = wanted()
    status = 0
    for key in keys or prebuilt.shipped_keys():
        if key not in known:
            print(f"{key}: no shipped grid uses it at these versions")
            status = 1
            continue
        with tempfile.TemporaryDirectory() as tmp:
            known[key][1](Path(tmp) / "model")
            diff = differences(prebuilt.PREBUILT_DIR / key, Path(tmp) / "model")
        print(
            f"{key}: "
            + ("the rebuild equals the shipped folder bit for bit" if not diff else "; ".join(diff))
        )
        status |= bool(diff)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    m = sub.add_parser("make")
    m.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="a model cache folder (built on this machine) to copy built keys from",
    )
    c = sub.add_parser("check")
    c.add_argument("keys", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "list":
        shipped = set(prebuilt.shipped_keys())
        for key, (grid, _, _) in wanted().items():
            print(f"{key}  {grid}  {'shipped' if key in shipped else 'not shipped'}")
        return 0
    if args.command == "make":
        return make(args.source)
    return check(args.keys)


if __name__ == "__main__":
    sys.exit(main())
