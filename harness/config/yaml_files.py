"""Grid YAML files read safely, and the traps of YAML 1.1 refused with their fix.

:func:`load_yaml_text` is PyYAML's safe loader that refuses a key given twice and a key YAML reads
as a boolean; base-60 and octal numbers (``1:30:00``, ``010``) are kept as :class:`YamlTrap` values
and reported; :func:`structure_problem` refuses a value that contains itself, deep nesting and
alias bombs. :func:`read_yaml` reads a grid file and the files it ``include:``s, merged (this file
over its includes; ``report.smoothing`` and each finding replaced whole).
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from harness.settings.schema import SpecError, deep_merge


def yaml_floats(text: str) -> list[str]:
    """Spellings of the number ``text`` that YAML reads as that float: the plain decimal, and the
    exponent form with a dot and a signed exponent (``1e4`` -> ``10000.0``, ``1.0e+4``); each one
    checked by parsing it."""
    number = float(text)
    candidates = [repr(number)]
    mantissa, sep, exponent = text.strip().lower().partition("e")
    if sep:
        mantissa = mantissa if "." in mantissa else mantissa + ".0"
        exponent = exponent if exponent[:1] in "+-" else "+" + exponent
        candidates.append(f"{mantissa}e{exponent}")
    good = []
    for c in candidates:
        try:
            parsed = load_yaml_text(c)
        except yaml.YAMLError:
            continue
        if isinstance(parsed, float) and parsed == number and c not in good:
            good.append(c)
    return good or [repr(number)]


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base": its keys may be overridden here
                continue
            if (
                isinstance(key_node, yaml.ScalarNode)
                and key_node.tag == "tag:yaml.org,2002:bool"
                and key_node.value.lower() not in ("true", "false")
            ):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key_node.value!r} is read by YAML 1.1 as the boolean "
                    f"{self.construct_object(key_node)}; quote it ('{key_node.value}':) to use it as a name",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key; PyYAML reports it below
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first.line + 1}): YAML would silently keep the last "
                    "value; keep one (to compare both, list them as an axis under 'grid')",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class YamlTrap(str):
    """A number YAML 1.1 reads other than it looks (base 60 ``1:30:00`` = 5400, octal ``010`` = 8),
    kept as its text with ``problem`` (the fix); :func:`read_yaml` reports and drops it, so the rest
    of the file is still checked."""

    problem: str = ""


def _no_base_60(kind: str):
    """PyYAML's int or float constructor, trapping YAML 1.1's base-60 form (``1:30:00`` is 5400)
    and, for ints, its octal form (``010`` is 8) as a :class:`YamlTrap`."""
    base = yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{kind}"]

    def construct(loader, node):
        value = base(loader, node)
        text = node.value
        if ":" in text:
            problem = (
                f"{text!r} is read by YAML 1.1 as the base-60 number {value}, not a time; write a plain "
                "number in the setting's unit (timeout_min: 90 for 1 h 30 min), or quote it if it is text"
            )
        elif kind == "int" and re.fullmatch(r"[-+]?0[0-7_]+", text):
            digits = text.lstrip("+-").lstrip("0_") or "0"
            problem = (
                f"{text!r} is read by YAML 1.1 as the octal number {value}; write {digits} without the "
                f"leading zero (or {value} if octal was meant), or quote it if it is text"
            )
        else:
            return value
        trap = YamlTrap(text)
        trap.problem = f"{problem} (line {node.start_mark.line + 1})"
        return trap

    return construct


def pop_traps(node: Any, where: str = "") -> list[tuple[str, str]]:
    """``(dotted key, problem)`` of every :class:`YamlTrap` in ``node``, each dropped from it."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for k in list(node):
            here = f"{where}.{k}" if where else str(k)
            if isinstance(node[k], YamlTrap):
                found.append((here, f"{here}: {node.pop(k).problem}."))
            else:
                found += pop_traps(node[k], here)
    elif isinstance(node, list):
        for i, v in enumerate(list(node)):
            if isinstance(v, YamlTrap):
                found.append((where, f"{where}[{i}]: {v.problem}."))
        node[:] = [v for v in node if not isinstance(v, YamlTrap)]
        for v in node:
            found += pop_traps(v, where)
    return found


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _no_base_60("int"))
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _no_base_60("float"))


#: Limits on a grid's YAML: nesting depth, and values counted with every alias expanded.
MAX_DEPTH = 64
MAX_VALUES = 200_000


def structure_problem(node: Any, where: str = "the file") -> str | None:
    """Why YAML data cannot be a grid's settings: an alias inside its own anchor (a value that
    contains itself), nesting deeper than :data:`MAX_DEPTH`, or more than :data:`MAX_VALUES`
    values once aliases are expanded (an "alias bomb"); None when it is fine."""
    stack: list[tuple[Any, int, frozenset[int]]] = [(node, 0, frozenset())]
    seen = 0
    while stack:
        value, depth, path = stack.pop()
        if not isinstance(value, Mapping | list):
            continue
        if id(value) in path:
            return f"{where} holds a value that contains itself (a YAML alias inside its own anchor); write it out."
        if depth > MAX_DEPTH:
            return f"{where} nests deeper than {MAX_DEPTH} levels; settings are a few levels deep."
        children = list(value.values()) if isinstance(value, Mapping) else value
        seen += len(children)
        if seen > MAX_VALUES:
            return (
                f"{where} holds more than {MAX_VALUES:,} values once its YAML aliases are expanded; "
                "write the settings out instead of nesting aliases."
            )
        inner = path | {id(value)}
        stack.extend((child, depth + 1, inner) for child in children)
    return None


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error in one line: where (line, column) and what, without PyYAML's stream name."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None)
    if mark is None or problem is None:
        return str(e)
    context = getattr(e, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {context + ', ' if context else ''}{problem}"


def load_yaml_text(text: str) -> Any:
    """``yaml.safe_load`` that rejects duplicate mapping keys (:class:`yaml.YAMLError` with line).

    Raises:
        yaml.YAMLError: bad YAML, a key given twice, or nesting so deep that PyYAML's parser
        (recursive) runs out of stack.
    """
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError as e:
        raise yaml.YAMLError(f"nested deeper than Python can parse (more than {MAX_DEPTH} levels)") from e


#: Keys that describe one file and are not inherited through ``include:``.
OWN_KEYS = ("name", "description", "notes")


#: The problems of the :class:`YamlTrap` values :func:`read_yaml` dropped while one grid loads, and
#: their keys as written (set by :func:`read_grid_yaml`).
_YAML_TRAPS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("yaml_traps", default=None)
_YAML_LEFT_OUT: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "yaml_left_out", default=None
)


def read_yaml(path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """Read a grid file and everything it ``include:``s, merged (this file over its includes).

    Raises:
        SpecError: missing file, YAML syntax error, a non-mapping document, or an include cycle.
    """
    path = Path(path)
    if path.resolve() in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path.resolve()))
        raise SpecError([f"include cycle: {chain}."], path)
    if path.is_dir():
        yamls = sorted(p.name for p in path.glob("*.yaml"))[:3]
        hint = f" (it holds {', '.join(yamls)})" if yamls else ""
        raise SpecError([f"{path} is a folder, not a grid file{hint}; give the grid's YAML file."], path)
    if not path.is_file():
        raise SpecError([f"no such grid file: {path}."], path)
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise SpecError([f"not a UTF-8 text file ({e.reason} at byte {e.start})."], path) from e
    except yaml.YAMLError as e:
        raise SpecError([f"not valid YAML at {yaml_problem(e)}"], path) from e
    if data is None and not _seen:
        raise SpecError(
            ["the file is empty (or only comments): a grid needs at least task: {name: ...}."], path
        )
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise SpecError([f"a grid file must be a mapping of keys, got {type(data).__name__}."], path)
    shape = structure_problem(data)  # before any walk of the data: an alias may contain itself
    if shape:
        raise SpecError([shape], path)
    traps = pop_traps(data)
    said, keys = _YAML_TRAPS.get(), _YAML_LEFT_OUT.get()
    if traps and (said is None or keys is None):  # read outside load_grid: refuse at once
        raise SpecError([p for _, p in traps], path)
    if traps:
        said.extend(f"{path.name}: {p}" if _seen else p for _, p in traps)
        keys.update(k for k, _ in traps)
    includes = data.get("include") or []
    includes = [includes] if isinstance(includes, str) else includes
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise SpecError(
            [f"include: {data.get('include')!r}: give a file name or a list of file names."], path
        )
    for inc in includes:
        if (path.parent / inc).is_dir():
            raise SpecError(
                [f"include: {inc!r}: {path.parent / inc} is a folder; include a grid file."], path
            )
        if not (path.parent / inc).is_file():
            raise SpecError([f"include: {inc!r}: no such file {path.parent / inc}."], path)
    merged: dict = {}
    for inc in includes:
        included = read_yaml(path.parent / inc, (*_seen, path.resolve()))
        # a file's identity is its own: an unnamed grid is named after its file, not after its base
        included = {k: v for k, v in included.items() if k not in OWN_KEYS}
        merged = _merge_files(merged, included)
    # Axes are not merged key by key with the included file's axes: a grid names its own axes.
    return _merge_files(merged, {k: v for k, v in data.items() if k != "include"})


def read_grid_yaml(path: Path) -> tuple[dict, list[str], set[str]]:
    """:func:`read_yaml` of a grid file, its :class:`YamlTrap` values (in it and in the files it
    includes) reported rather than refused: ``(the merged data without them, their problems, their
    dotted keys as written)``, so that the rest of the file is still checked.

    Raises:
        SpecError: as :func:`read_yaml`, but for the traps.
    """
    traps, trapped = _YAML_TRAPS.set([]), _YAML_LEFT_OUT.set(set())
    try:
        config = read_yaml(path)
        return config, list(_YAML_TRAPS.get() or []), set(_YAML_LEFT_OUT.get() or ())
    finally:
        _YAML_TRAPS.reset(traps)
        _YAML_LEFT_OUT.reset(trapped)


def finding_origins(path: Path) -> dict[str, list[Path]]:
    """For each finding a grid file ends up with, the files that state it, in merge order: its
    included files that do, then the file itself if it does (the last one's finding is the one
    used: a finding is replaced whole). Files that cannot be read give nothing (:func:`read_yaml`
    has named them)."""
    path = Path(path)
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(data, Mapping):
        return {}
    includes = data.get("include") or []
    includes = [includes] if isinstance(includes, str) else includes
    out: dict[str, list[Path]] = {}
    for inc in includes if isinstance(includes, list) else []:
        if isinstance(inc, str) and (path.parent / inc).resolve() != path.resolve():
            for k, files in finding_origins(path.parent / inc).items():
                out[k] = [*out.get(k, []), *files]
    own = data.get("findings")
    if isinstance(own, Mapping):
        for k, v in own.items():
            if v is None and str(k) in out:
                del out[str(k)]
            else:
                out[str(k)] = [*out.get(str(k), []), path]
    elif "findings" in data:
        out = {}
    return out


def _merge_files(base: Mapping, top: Mapping) -> dict:
    """One grid file's keys over another's: :func:`harness.settings.schema.deep_merge`, except that
    ``report.smoothing`` is one choice (``{window: n}`` or ``{ema: a}``) and replaces the other
    file's whole, and so does each finding."""
    report, under = top.get("report"), base.get("report")
    if isinstance(report, Mapping) and "smoothing" in report and isinstance(under, Mapping):
        base = {**base, "report": {k: v for k, v in under.items() if k != "smoothing"}}
    findings, included = top.get("findings"), base.get("findings")
    if isinstance(findings, Mapping) and isinstance(included, Mapping):  # a finding is replaced whole
        base = {**base, "findings": {k: {} if k in findings else v for k, v in included.items()}}
        # ``F1: null`` drops an included finding (as null unsets an included report key)
        dropped = [k for k, v in findings.items() if v is None and k in included]
        if dropped:
            top = {**top, "findings": {k: v for k, v in findings.items() if k not in dropped}}
            base["findings"] = {k: v for k, v in base["findings"].items() if k not in dropped}
    return deep_merge(base, top)


def non_string_keys(node: Any, where: str) -> list[str]:
    out = []
    if isinstance(node, Mapping):
        for k, v in node.items():
            here = f"{where}.{k}" if where else str(k)
            if not isinstance(k, str):
                out.append(
                    f"{where or 'top level'}: key {k!r} is not a string ({type(k).__name__}); keys are "
                    f"names, so quote it ('{k}': ...)."
                )
            out += non_string_keys(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += non_string_keys(v, f"{where}[{i}]")
    return out
