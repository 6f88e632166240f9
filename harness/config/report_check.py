"""The grid's ``report:`` section, checked and normalised when the grid is loaded.

Its schema (keys, choices, the smoothing parser) is :class:`harness.config.report_section.ReportSettings`,
shared with the report; here each key's value is checked against the grid: ``hue``/``col``/``row``
and the ``baseline``'s keys name run settings, metric names are names, ``target`` a finite number.
No run setting: no run id depends on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.config import report_section
from harness.config.keys import is_number, normalize_key, run_setting_key, suggest
from harness.config.report_section import REPORT_KEYS, REPORT_LEAD, REPORT_X


def _report_setting_keys(value: Any, where: str, problems: list[str]) -> list[str] | None:
    """``hue``/``col``/``row``: a setting key or a list of them, as dotted keys."""
    raw = [value] if isinstance(value, str) else value
    if not isinstance(raw, list) or not raw or not all(isinstance(k, str) and k.strip() for k in raw):
        problems.append(
            f"{where} = {value!r}: give a setting key or a non-empty list of them, written like grid "
            "keys (epsilon, task.kwargs.max_digits, seed), e.g. [epsilon, epsilon_high]; null for none."
        )
        return None
    keys: list[str] = []
    ok = True
    for k in raw:
        key = normalize_key(k.strip())
        problem = run_setting_key(key, where)
        if problem is None and key in keys:
            problem = f"{where}: {key} is given twice (bare and dotted names are one key); give it once."
        if problem:
            problems.append(problem)
            ok = False
        else:
            keys.append(key)
    return keys if ok else None


def _report_baseline(value: Any, where: str, problems: list[str], grid_keys: Sequence[str]) -> str | None:
    """``baseline``: a variant label, or KEY=VALUE pairs joined by commas (spacing normalised).

    Keys are written like grid keys, or by the last part of a key the grid varies (as variant labels
    name it: ``max_digits=1``); they are kept as written, since the text may be a variant's label.
    """
    fix = (
        "write KEY=VALUE, several joined by commas ('epsilon=0.2, epsilon_high=0.2'), or a variant "
        "label (quoted when YAML would read it as a number)"
    )
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where} = {value!r}: the baseline is a non-empty string; {fix}.")
        return None
    text = value.strip()
    if "=" not in text:
        return text
    short = {k.rsplit(".", 1)[-1] for k in grid_keys}
    parts = []
    ok = True
    for part in text.split(","):
        k, sep, v = (s.strip() for s in part.partition("="))
        if not sep or not k or not v:
            problems.append(f"{where} = {value!r}: {part.strip()!r} is not KEY=VALUE; {fix}.")
            ok = False
            continue
        problem = None if k in short else run_setting_key(normalize_key(k), where)
        if normalize_key(k) in (normalize_key(p.split("=", 1)[0]) for p in parts):
            problem = f"{where} = {value!r}: {k} is given twice; a baseline names one value per key."
        elif k == "seed":
            problem = (
                f"{where} = {value!r}: seed cannot name the baseline: a variant pools its seeds (each seed "
                "is one run of its interval); name the settings the variants differ in."
            )
        if problem:
            problems.append(problem)
            ok = False
        parts.append(f"{k}={v}")
    return ", ".join(parts) if ok else None


def _report_smoothing(value: Any, where: str, problems: list[str]) -> Any:
    """``smoothing``: :func:`harness.config.report_section.parse_smoothing`'s setting, or None (a problem)."""
    try:
        return report_section.parse_smoothing(value)
    except report_section.SmoothingError as e:
        part = f".{e.part}" if e.part else ""
        problems.append(f"{where}{part} = {e.value!r}: {e}")
        return None


def _report_target(value: Any, where: str, problems: list[str]) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and is_number(value) and math.isfinite(float(value)):
        fix = f"write it bare: target: {float(value)!r}"
    else:
        fix = "write e.g. target: 0.9 (the metric value runs must reach), or leave it out"
    problems.append(f"{where} = {value!r}: the target is a finite number; {fix}.")
    return None


def _report_names(value: Any, where: str, problems: list[str], many: bool) -> Any:
    """``metric`` (``many`` False): a metric name; ``curves``/``metrics``: a list of them."""
    if not many:
        if isinstance(value, str) and value.strip():
            return value.strip()
        problems.append(f"{where} = {value!r}: give a metric name, e.g. reward or eval/accuracy.")
        return None
    if not isinstance(value, list) or not all(isinstance(m, str) and m.strip() for m in value):
        example = f"[{value}]" if isinstance(value, str) else "[reward, eval/accuracy]"
        problems.append(f"{where} = {value!r}: give a list of metric names, e.g. {example}.")
        return None
    names = [m.strip() for m in value]
    twice = sorted({m for m in names if names.count(m) > 1})
    if twice:
        problems.append(f"{where}: {', '.join(twice)} is listed more than once; list each metric once.")
        return None
    return names


def _report_choice(value: Any, where: str, problems: list[str], choices: Sequence[str], what: str) -> Any:
    if isinstance(value, str) and value in choices:
        return value
    name = where.rsplit(".", 1)[-1]
    example = f"-o report.{name}={choices[0]}" if where.startswith("-o") else f"{name}: {choices[0]}"
    problems.append(f"{where} = {value!r}: {what} is one of {', '.join(choices)}; write e.g. {example}.")
    return None


def check_report(
    section: Any,
    problems: list[str],
    given_at: Mapping[str, str] | None = None,
    grid_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``report:`` section checked and normalised, as JSON data; problems go to ``problems``.

    ``hue``/``col``/``row`` become lists of dotted setting keys; ``smoothing`` one of "auto", "none",
    ``{"window": n}``, ``{"ema": a}``; ``target`` a float; other keys as given. Keys left out or null
    are absent. ``given_at`` names where a key was set when not in the file (``-o report.x``,
    ``profiles.quick.report.hue``); ``grid_keys`` are the grid's varying keys (a baseline may name
    them by their last part, as variant labels do).
    """
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problems.append(
            f"report = {section!r}: report is a mapping of layout keys ({', '.join(REPORT_KEYS)}), "
            "e.g. report: {hue: loss_type, x: tokens}."
        )
        return {}
    given_at = given_at or {}
    out: dict[str, Any] = {}
    for name, value in section.items():
        where = given_at.get(name, f"report.{name}")
        if name not in REPORT_KEYS:
            problems.append(
                f"{where}: unknown report key '{name}'.{suggest(str(name), REPORT_KEYS)} "
                f"Valid: {', '.join(REPORT_KEYS)}."
            )
            continue
        if value is None:
            continue
        checked = _REPORT_CHECKS[name](value, where, problems, grid_keys)
        if checked is not None:
            out[name] = checked
    return {k: out[k] for k in REPORT_KEYS if k in out}


def _report_normalise(value: Any, where: str, problems: list[str]) -> dict[str, Any] | None:
    """``normalise``: :func:`harness.config.report_section.parse_normalise`'s setting, or None (a problem)."""
    try:
        return report_section.parse_normalise(value)
    except ValueError as e:
        problems.append(f"{where} = {value!r}: {e}.")
        return None


def _report_seeds(value: Any, where: str, problems: list[str]) -> bool | None:
    if isinstance(value, bool):
        return value
    problems.append(f"{where} = {value!r}: seeds is true or false (draw each run faintly).")
    return None


#: How each ``report:`` key is checked: ``(value, where, problems, grid keys) -> value or None``.
_REPORT_CHECKS: dict[str, Callable[[Any, str, list[str], Sequence[str]], Any]] = {
    "hue": lambda v, w, p, g: _report_setting_keys(v, w, p),
    "col": lambda v, w, p, g: _report_setting_keys(v, w, p),
    "row": lambda v, w, p, g: _report_setting_keys(v, w, p),
    "baseline": _report_baseline,
    "x": lambda v, w, p, g: _report_choice(v, w, p, REPORT_X, "the x axis"),
    "lead": lambda v, w, p, g: _report_choice(v, w, p, REPORT_LEAD, "the figure shown first"),
    "smoothing": lambda v, w, p, g: _report_smoothing(v, w, p),
    "metric": lambda v, w, p, g: _report_names(v, w, p, many=False),
    "curves": lambda v, w, p, g: _report_names(v, w, p, many=True),
    "metrics": lambda v, w, p, g: _report_names(v, w, p, many=True),
    "target": lambda v, w, p, g: _report_target(v, w, p),
    "seeds": lambda v, w, p, g: _report_seeds(v, w, p),
    "normalise": lambda v, w, p, g: _report_normalise(v, w, p),
}
