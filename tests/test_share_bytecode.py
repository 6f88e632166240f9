"""scripts/share_bytecode.py: .venv-min takes .venv's bytecode only for the very files both hold."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
from pathlib import Path

from helpers import REPO

spec = importlib.util.spec_from_file_location("share_bytecode", REPO / "scripts" / "share_bytecode.py")
script = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = script  # its worker processes take its function by name
spec.loader.exec_module(script)

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def venv(root: Path) -> Path:
    site = root / "lib" / PY / "site-packages"
    site.mkdir(parents=True)
    return site


def cached(module: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(module)))


def test_a_linked_file_takes_the_bytecode_and_any_other_is_compiled_here(tmp_path):
    theirs, ours = venv(tmp_path / "a"), venv(tmp_path / "b")
    (theirs / "pkg").mkdir()
    (ours / "pkg").mkdir()
    shared = theirs / "pkg" / "shared.py"
    shared.write_text("VALUE = 1\n")
    os.link(shared, ours / "pkg" / "shared.py")  # as uv links one cached file into both
    (theirs / "pkg" / "own.py").write_text("VALUE = 2\n")
    (ours / "pkg" / "own.py").write_text("VALUE = 2\n")  # the same text, another file
    (ours / "pkg" / "broken.py").write_text("def (:\n")
    (ours / "pkg" / "warns.py").write_text('x = 1 is "a"\n')  # a SyntaxWarning, compiled quietly
    for module in (shared, theirs / "pkg" / "own.py"):
        py_compile.compile(str(module), doraise=True)
    marker = cached(shared).read_bytes()

    assert script.share(tmp_path / "a", tmp_path / "b") == (1, 2)
    assert cached(ours / "pkg" / "shared.py").read_bytes() == marker
    assert not cached(ours / "pkg" / "shared.py").samefile(cached(shared))  # a copy, not a link
    assert cached(ours / "pkg" / "own.py").is_file() and cached(ours / "pkg" / "warns.py").is_file()
    assert not cached(ours / "pkg" / "broken.py").exists()


def test_a_copied_file_is_the_one_python_accepts_for_its_source(tmp_path):
    """The copy keeps the source's size and modification time in its header: Python loads it."""
    theirs, ours = venv(tmp_path / "a"), venv(tmp_path / "b")
    module = theirs / "shared_mod.py"
    module.write_text("VALUE = 41\n")
    os.link(module, ours / "shared_mod.py")
    py_compile.compile(str(module), doraise=True)
    script.share(tmp_path / "a", tmp_path / "b")
    loader = importlib.machinery.SourceFileLoader("shared_mod", str(ours / "shared_mod.py"))
    data = cached(ours / "shared_mod.py").read_bytes()
    stat = (ours / "shared_mod.py").stat()
    # the header's fields: flags 0 (checked by time), then the source's mtime and size
    assert int.from_bytes(data[4:8], "little") == 0
    assert int.from_bytes(data[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
    assert int.from_bytes(data[12:16], "little") == stat.st_size & 0xFFFFFFFF
    assert loader.get_code("shared_mod") is not None
