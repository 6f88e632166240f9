"""The import rules of the code, read from its source (no module is imported):

- ``analysis`` takes from ``harness`` only the results layout (``harness.layout``), the schema
  (``harness.settings.schema``) and the plain data of the boundary's record of TRL's losses, and no
  module of it takes a private name of another;
- the schema (``schema`` and ``runs``) imports nothing else of the project, so every module can take it;
- the schema, planning (``spec`` and the modules it reads a grid with, ``grid``, ``validate`` and its
  rules) and the TRL boundary import no torch, transformers or trl at module level, so planning a
  grid never loads the model stack;
- the analysis's settings (``analysis.settings``), which planning takes, import only
  ``harness.settings`` of the project and nothing heavy, and ``analysis/__init__.py`` nothing;
- ``training`` does not import ``validate``: what it needs of TRL comes from ``harness.trl_boundary``;
- module-level imports among the project's modules form no cycle;
- each package imports only the packages its row of ARCHITECTURE.md's table names, each in a row
  above its own, counting imports inside functions, and the packages' imports form no cycle;
- every private name of TRL the trainer relies on exists in the installed TRL.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "analysis")
HEAVY = ("torch", "transformers", "trl")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _imports(path: Path, module_level_only: bool) -> set[str]:
    """Absolute module names imported by a file (``from a import b`` gives ``a`` and ``a.b``);
    ``module_level_only``: leave out imports inside functions and ``if TYPE_CHECKING:`` blocks,
    which do not run when the module is imported."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if module_level_only and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if module_level_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child)

    visit(ast.parse(path.read_text()))
    names = set()
    for n in found:
        if isinstance(n, ast.Import):
            names.update(a.name for a in n.names)
        elif n.module and n.level == 0:
            names.add(n.module)
            names.update(f"{n.module}.{a.name}" for a in n.names)
    return names


#: What the analysis may take from harness: the results layout, the schema, and the plain data of
#: the boundary's record of TRL's losses (never a function that asks TRL).
ANALYSIS_MAY_TAKE = (
    "harness.layout",
    "harness.settings.schema",
    "harness.trl_boundary.KNOWN_LOSS_TYPES",
    "harness.trl_boundary.NAMED_LOSS_VARIANTS",
    "harness.trl_boundary.loss_names",
)


def _within(name: str, modules) -> bool:
    """``name`` is one of ``modules`` or a name imported from one (``harness.layout.DONE``)."""
    return any(name == m or name.startswith(m + ".") for m in modules)


def test_analysis_takes_from_harness_only_what_it_may():
    bad = {}
    for name, path in _modules().items():
        if name.startswith("analysis"):
            found = _imports(path, False)
            # ``from harness.config import schema`` names the package too: keep the deepest names
            deepest = {i for i in found if not any(j.startswith(i + ".") for j in found)}
            bad[name] = sorted(
                i for i in deepest if i.startswith("harness") and not _within(i, ANALYSIS_MAY_TAKE)
            )
    bad = {k: v for k, v in bad.items() if v and v != ["harness"]}
    assert not bad, f"analysis imports more of harness than {ANALYSIS_MAY_TAKE}: {bad}"


def _private_names_taken(path: Path, modules: Collection[str]) -> list[str]:
    """The private names (``_name``, not dunder) a file takes from another module of the project:
    ``from m import _name``, and ``m._name`` through a module it imported (``from a import m``,
    ``import a.m as m``)."""
    tree = ast.parse(path.read_text())
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"from {node.module} import {a.name}")
                if f"{node.module}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in modules})
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_of_analysis_takes_a_private_name_of_another_module():
    """The report's parts (and every module of analysis) talk through public names: what one
    module needs of another is named without a leading underscore, with its docstring."""
    mods = _modules()
    taken = {
        name: found
        for name, path in mods.items()
        if name.startswith("analysis") and (found := _private_names_taken(path, set(mods)))
    }
    assert not taken, f"private names taken across modules: {taken}"


#: The schema: the settings sections, and the grid and run types built from them only.
SCHEMA = ("harness.settings.schema", "harness.settings.runs")


@pytest.mark.parametrize("module", SCHEMA)
def test_the_schema_imports_nothing_of_the_project(module):
    found = sorted(
        i
        for i in _imports(_modules()[module], False)
        if i.split(".")[0] in PACKAGES and not _within(i, SCHEMA)
    )
    assert not found, f"{module} imports {found}; the schema is the bottom layer every module may take"


@pytest.mark.parametrize(
    "module",
    [
        "harness.settings.schema",
        "harness.settings.runs",
        "harness.config.yaml_files",
        "harness.config.keys",
        "harness.config.overrides",
        "harness.config.report_check",
        "analysis.settings.report",
        "analysis.settings.report_values",
        "harness.config.spec",
        "harness.config.grid",
        "harness.config.validate",
        "harness.config.rules_base",
        "harness.config.rules_trainer",
        "harness.config.rules_run",
        "harness.trl_boundary",
    ],
)
def test_planning_imports_no_model_stack_at_module_level(module):
    heavy = sorted(i for i in _imports(_modules()[module], True) if i.split(".")[0] in HEAVY)
    assert not heavy, (
        f"{module} imports {heavy} at module level; import them inside the function that needs them"
    )


#: What the analysis's settings may not import at module level: planning takes them, and `plan`
#: loads neither the model stack nor the analysis's.
ANALYSIS_HEAVY = (*HEAVY, "pandas", "numpy", "pyarrow", "scipy", "matplotlib")


@pytest.mark.parametrize(
    "module",
    ["analysis", "analysis.settings.keys", "analysis.settings.findings", "analysis.settings.finding_dose"],
)
def test_the_analysis_settings_are_light(module):
    """Planning imports ``analysis.settings``: importing it runs ``analysis/__init__.py``, which
    must import nothing at module level, and the settings only ``harness.settings`` of the project
    and nothing heavy."""
    found = _imports(_modules()[module], True)
    heavy = sorted(i for i in found if i.split(".")[0] in ANALYSIS_HEAVY)
    project = sorted(
        i
        for i in found
        if i.split(".")[0] in PACKAGES and not _within(i, ("harness.settings", "analysis.settings"))
    )
    assert not heavy and not project, f"{module} imports {heavy + project} at module level"


def test_training_does_not_import_validate():
    found = sorted(
        i
        for i in _imports(_modules()["harness.train.training"], False)
        if i.startswith("harness.config.validate")
    )
    assert not found, f"harness.train.training imports {found}; take TRL's pieces from harness.trl_boundary"


def test_no_import_cycles_at_module_level():
    mods = _modules()
    graph = {
        name: {i for i in _imports(path, True) if i in mods and i != name and i not in PACKAGES}
        for name, path in mods.items()
    }
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"


def test_trl_has_every_private_name_the_trainer_relies_on():
    from harness import trl_boundary

    missing = trl_boundary.missing_private_names()
    assert not missing, (
        f"the installed TRL's GRPOTrainer lacks {missing}, which harness.train.trainer.HarnessGRPOTrainer "
        "overrides or reads (harness.trl_boundary.TRL_PRIVATE_NAMES): adapt the trainer to this TRL, "
        "or install the TRL version pyproject.toml names"
    )


def test_a_private_name_trl_lacks_is_reported(monkeypatch):
    from harness import trl_boundary

    monkeypatch.setattr(trl_boundary, "TRL_PRIVATE_METHODS", (*trl_boundary.TRL_PRIVATE_METHODS, "_no_such"))
    monkeypatch.setattr(trl_boundary, "TRL_PRIVATE_ATTRIBUTES", ("_step", "_no_such_attr"))
    assert trl_boundary.missing_private_names() == ["_no_such", "_no_such_attr"]


def test_no_module_changes_the_working_folder():
    """A library call must not move the process's working folder (``os.chdir``) under its caller.
    The preloaded interpreter's forked child is no library call: it takes its client's folder as a
    new process would (``harness.cluster.preload._become``)."""
    own_process = {"harness.cluster.preload"}
    offenders = [
        str(path.relative_to(ROOT))
        for name, path in _modules().items()
        if "os.chdir(" in path.read_text() and name not in own_process
    ]
    assert not offenders, f"os.chdir in {offenders}: pass a working folder to the subprocess instead"


@pytest.mark.slow
def test_no_function_over_the_length_and_nesting_limits(capsys):
    """``scripts/structure.py``: no function of harness or analysis over 60 lines of code or nested
    more than 4 levels deep."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
    structure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(structure)
    code = structure.main([str(ROOT / pkg) for pkg in PACKAGES])
    assert code == 0, capsys.readouterr().out


def test_loss_types_read_from_trl_are_the_ones_its_loss_branches_on():
    """What the field help declares and what ``_compute_loss`` computes must agree: a TRL that adds
    or drops a loss type fails here, not in a user's grid."""
    import inspect
    import re

    from trl import GRPOTrainer

    from harness import trl_boundary

    source = inspect.getsource(GRPOTrainer._compute_loss)
    tests = re.findall(r'loss_type (?:==|in) (\[[^\]]*\]|"\w+")', source)
    branched = set(re.findall(r'"(\w+)"', " ".join(tests)))
    assert set(trl_boundary.loss_types()) == branched, (trl_boundary.loss_types(), sorted(branched))


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
#: Packages of the package table; a module belongs to the longest one its name starts with, and a
#: module outside every package (``harness.layout``) is its own.
UNITS = (
    "harness.settings", "harness.config", "harness.models", "harness.rewards", "harness.losses",
    "harness.train", "harness.cluster", "harness.bench", "analysis.settings", "analysis.report", "analysis",
)  # fmt: skip


def _unit(module: str) -> str:
    if module == "harness.__main__":
        return "harness.cli"
    return next(
        (u for u in sorted(UNITS, key=len, reverse=True) if module == u or module.startswith(u + ".")), module
    )


def _table(header: str) -> list[list[str]]:
    """The rows of the markdown table under the line ``header`` in ARCHITECTURE.md, as cells."""
    lines = ARCHITECTURE.read_text().splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _package_rules() -> dict[str, set[str]]:
    import re

    rules = {}
    for package, _, imports in _table("| package | concern | imports of the project |"):
        names = set(re.findall(r"`([\w.]+)`", re.sub(r"\([^)]*\)", "", imports)))
        rules[package.strip("`")] = names
    return rules


def _package_imports() -> dict[str, dict[str, list[str]]]:
    """Per package, the packages it imports (at module level or inside a function), each with the
    modules that do."""
    mods = _modules()
    found: dict[str, dict[str, list[str]]] = {}
    for name, path in mods.items():
        for imported in _imports(path, False):
            target = imported
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if not target or target in PACKAGES or _unit(target) == _unit(name):
                continue
            found.setdefault(_unit(name), {}).setdefault(_unit(target), []).append(f"{name} -> {target}")
    return found


def test_each_package_imports_only_what_its_row_in_the_architecture_names():
    rules, actual = _package_rules(), _package_imports()
    assert set(actual) <= set(rules), (
        f"packages missing from ARCHITECTURE.md's table: {set(actual) - set(rules)}"
    )
    broken = {
        pkg: {t: sorted(set(v))[:3] for t, v in targets.items() if t not in rules[pkg]}
        for pkg, targets in actual.items()
    }
    broken = {k: v for k, v in broken.items() if v}
    assert not broken, f"imports ARCHITECTURE.md's package table does not allow: {broken}"
    stale = {pkg: sorted(allowed - set(actual.get(pkg, {}))) for pkg, allowed in rules.items()}
    stale = {k: v for k, v in stale.items() if v}
    assert not stale, f"ARCHITECTURE.md allows imports no module makes any more (update the table): {stale}"


def test_the_package_table_reads_bottom_up():
    """Each row names only packages of the rows above it: no arrow points back up."""
    rows = list(_package_rules().items())
    order = {pkg: i for i, (pkg, _) in enumerate(rows)}
    up = {pkg: sorted(t for t in allowed if order.get(t, len(rows)) >= order[pkg]) for pkg, allowed in rows}
    up = {k: v for k, v in up.items() if v}
    assert not up, f"rows of ARCHITECTURE.md's package table that name a package at or below their own: {up}"


def test_no_import_cycles_between_packages():
    """The packages' imports, those inside functions included, form no cycle (a cycle would have
    one of its arrows point back up whatever the order of the table)."""
    graph = {pkg: set(targets) for pkg, targets in _package_imports().items()}
    seen: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[node] = 2

    for name in sorted(graph):
        if name not in seen:
            visit(name, [name])
    imports = _package_imports()
    shown = [[*c, [imports[a][b][:2] for a, b in zip(c, c[1:], strict=False)]] for c in cycles]
    assert not cycles, f"import cycles between packages (with the imports that make them): {shown}"


def test_the_architecture_names_every_module_and_no_other():
    import re

    named: set[str] = set()
    for header in ("| module | owns |",):
        for row in ARCHITECTURE.read_text().split(header)[1:]:
            for line in row.splitlines()[2:]:
                if not line.startswith("|"):
                    break
                named.update(re.findall(r"`([\w.]+)`", line.split("|")[1]))
    mods = _modules()
    modules = {m for m, path in mods.items() if path.name not in ("__init__.py", "__main__.py")}
    covered = {m for m in modules if m in named or any(m.startswith(n + ".") for n in named)}
    assert modules == covered, f"modules ARCHITECTURE.md does not name: {sorted(modules - covered)}"
    assert named <= set(mods), f"ARCHITECTURE.md names no such module: {sorted(named - set(mods))}"


def test_no_module_is_over_800_lines_and_no_report_module_over_600():
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    over = {n: s for n, s in sizes.items() if s > (600 if n.startswith("analysis.report") else 800)}
    assert not over, f"modules over the limit (800 lines; 600 in analysis.report): {over}"
