"""The test tiers. The fast tier, ``pytest -m "not slow"``, leaves out every test that uses a model
fixture or the cluster (tests/conftest.py marks them) and still reaches every module of ``harness``
and ``analysis``, read from the source (no coverage): a module counts as reached when a test file
with a fast-tier test imports it (anywhere in the file) or names it in a string
(``monkeypatch.setattr("harness.x.f", ...)``), when the module-level imports of those load it, when a
function of a module the test file imports imports it (one step: the test calls into that module),
or when it is an entry point of the package and ``harness.losses.loading``, which loads them, is
reached. ``__main__`` modules, the few lines behind ``python -m``, are left out. Test files take shared code from helper modules, never from another test file."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MODEL_FIXTURES

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGES = ("harness", "analysis")
FAST_TIER = "not slow"
#: Imports of a test module or of conftest, in code or in a code string run in a subprocess.
TEST_IMPORT = re.compile(r"^\s*(?:from|import)\s+(test_\w+|conftest)\b", re.M)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, module_level_only: bool) -> set[str]:
    """Absolute module names a file imports (``from a import b`` gives ``a`` and ``a.b``, relative
    imports resolved); ``module_level_only``: leave out imports inside functions, which do not run
    when the module is imported."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1]) if ROOT in path.parents else ""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if module_level_only and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.Import):
                names.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, base] if base else up)
                names.add(base)
                names.update(f"{base}.{a.name}" for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def _loaded_by(names: set[str], modules: dict[str, Path]) -> set[str]:
    """The project's modules that importing ``names`` loads: each named module, its parent
    packages, and what their module-level imports load in turn."""
    todo = [n for n in names if n in modules]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += [n for n in _imports(modules[name], module_level_only=True) if n in modules]
    return seen


@pytest.fixture(scope="module")
def fast_tier() -> str:
    """The fast tier's tests and the fixtures each uses, as ``pytest --fixtures-per-test`` lists
    them (collection only, in one process: nothing runs; xdist's workers would each collect again)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--fixtures-per-test", "-q", "-m", FAST_TIER, "-p", "no:cacheprovider", "-n", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _fast_files(listing: str) -> set[Path]:
    return {ROOT / p for p in re.findall(r"^-*\s*\((tests/[\w/]+\.py):\d+\)", listing, flags=re.M)}


@pytest.mark.slow  # collects the whole suite in a subprocess
def test_the_fast_tier_uses_no_model_fixture(fast_tier):
    files = _fast_files(fast_tier)
    assert len(files) > 10, fast_tier[-2000:]
    used = {name for name in MODEL_FIXTURES if re.search(rf"^{name} -- ", fast_tier, flags=re.M)}
    assert not used, f"fast-tier tests use {sorted(used)}: they build a model"


def _reached(files: set[Path], modules: dict[str, Path]) -> set[str]:
    named: set[str] = set()
    for f in files:
        named |= _imports(f, module_level_only=False)
        text = f.read_text()
        named |= {m for m in modules if re.search(rf"[\"' ]{re.escape(m)}[\"':.]", text)}
    one_step = {n for m in named if m in modules for n in _imports(modules[m], module_level_only=False)}
    reached = _loaded_by(named | one_step, modules)
    if "harness.losses.loading" in reached:
        entry_points = re.findall(r'^\w+ = "([\w.]+):', (ROOT / "pyproject.toml").read_text(), flags=re.M)
        reached |= _loaded_by(set(entry_points), modules)
    return reached


@pytest.mark.slow  # collects the whole suite in a subprocess
def test_the_fast_tier_reaches_every_module(fast_tier):
    modules = _modules()
    wanted = {m for m in modules if not m.endswith(".__main__")}
    missing = sorted(wanted - _reached(_fast_files(fast_tier), modules))
    assert not missing, f"no fast-tier test file imports or loads {missing}"


def test_the_module_reach_counts_module_level_imports_only(tmp_path):
    modules = _modules()
    assert "harness.settings.schema" in _loaded_by(
        {"harness.config.spec"}, modules
    )  # spec imports the schema
    assert _loaded_by({"harness.settings.schema"}, modules) == {
        "harness",
        "harness.settings",
        "harness.settings.schema",
    }
    assert _loaded_by({"numpy"}, modules) == set()
    # a function-level import counts one step from what the test file imports, not further
    assert "harness.config.scale" in _reached({TESTS / "test_validate.py"}, modules)
    assert "harness.bench.losses" in _reached({TESTS / "test_bench.py"}, modules)
    assert "harness.bench.vespo" not in _reached({TESTS / "test_wseq.py"}, modules)


def test_no_test_file_imports_another_test_file():
    offenders = {
        path.name: found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := TEST_IMPORT.findall(path.read_text()))
    }
    assert not offenders, f"move shared code to tests/helpers.py: {offenders}"


def test_the_import_rule_sees_imports_in_code_strings():
    assert TEST_IMPORT.findall('CHECK = """\nimport json\nfrom test_trainer import make_spec\n"""') == [
        "test_trainer"
    ]
    assert TEST_IMPORT.findall("    from conftest import cli\n") == ["conftest"]
    assert not TEST_IMPORT.findall("from helpers import cli  # not from test_trainer\n")
