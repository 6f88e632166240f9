"""Give a virtual environment the bytecode another one compiled for the same files.

    python scripts/share_bytecode.py FROM_VENV TO_VENV

uv links each installed file from its cache, so two environments set up from one cache at the lock's
versions (scripts/setup.sh's .venv and .venv-min) hold the same file, one inode, for each module they
share. For every module of TO_VENV's site-packages that is that same file in FROM_VENV's, the
``__pycache__`` entry FROM_VENV compiled is copied (a copy, not a link: either environment may
recompile its own). Every other module is compiled here. Python checks a ``.pyc`` against its
source's size and modification time when it imports it, and recompiles one that does not match, so a
copied file is used only where it is right. Prints how many were copied and compiled (on every
core, where the two environments were set up from different caches).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import py_compile
import shutil
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def site_packages(venv: Path) -> Path:
    (found,) = (venv / "lib").glob("python*/site-packages")
    return found


def compile_quietly(modules: list[str]) -> int:
    """Compile ``modules`` (paths); how many compiled. A module that does not compile is left, as
    compileall leaves it: it fails where it is imported."""
    done = 0
    for module in modules:
        with warnings.catch_warnings():  # as compileall -q: a module's SyntaxWarnings are its own
            warnings.simplefilter("ignore")
            # quiet=2: a module that does not compile gives None, with nothing printed or raised
            with contextlib.suppress(OSError):  # unreadable, or not writable: left to the import
                done += py_compile.compile(module, quiet=2) is not None
    return done


def share(source_venv: Path, target_venv: Path) -> tuple[int, int]:
    """(copied, compiled) over TO's modules, the rest compiled on every core; raises
    FileNotFoundError where a venv has no site-packages."""
    src, dst = site_packages(source_venv), site_packages(target_venv)
    copied, rest = 0, []
    for root, dirs, files in os.walk(dst):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith(".py"):
                continue
            module = Path(root) / name
            cached = Path(importlib.util.cache_from_source(str(module)))
            theirs_source = src / module.relative_to(dst)
            theirs = Path(importlib.util.cache_from_source(str(theirs_source)))
            if theirs.is_file() and theirs_source.is_file() and os.path.samefile(module, theirs_source):
                cached.parent.mkdir(exist_ok=True)
                shutil.copy2(theirs, cached)
                copied += 1
            else:
                rest.append(str(module))
    workers = os.cpu_count() or 1
    chunks = [rest[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers) as pool:
        compiled = sum(pool.map(compile_quietly, chunks))
    return copied, compiled


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    copied, compiled = share(Path(argv[0]), Path(argv[1]))
    print(f"bytecode: {copied} module(s) from {argv[0]}, {compiled} compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
