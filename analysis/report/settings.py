"""The ``report:`` section's settings (:class:`ReportSettings`), its check, and the parsing of
the baseline and smoothing settings."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from harness.config.report_section import (
    REPORT_LEAD,
    REPORT_X,
    SECTION_WHAT,
    ReportError,
    ReportSettings,
    SmoothingError,
    check_progression,
    parse_normalise,
    parse_smoothing,
    parse_smoothing_text,
)


def check_section(section: Any, where: str) -> list[str]:
    """Problems with a ``report:`` section as recorded in ``grid.json`` (empty list: none).

    Args:
        section: the recorded section.
        where: the file, for the messages.
    """
    if section is None:
        return []
    if not isinstance(section, Mapping):
        return [
            f"{where}: report is {type(section).__name__}, not a mapping of layout keys ({', '.join(SECTION_WHAT)})"
        ]
    problems = []

    def names(v: Any) -> bool:
        return isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))

    for key, value in section.items():
        if key == "smoothing":
            problems += _smoothing_problems(value, where)
            continue
        if key == "normalise":
            try:
                parse_normalise(value)
            except ValueError as e:
                problems.append(f"{where}: report.normalise = {value!r}: {e}")
            continue
        if key == "progression":
            if value is not None:
                problems += [f"{where}: {p}" for p in check_progression(value, recorded=True)[1]]
            continue
        ok = {
            "hue": names(value) and bool(value),
            "col": names(value),
            "row": names(value),
            "baseline": isinstance(value, str) or value is None,
            "x": value in REPORT_X,
            "metric": isinstance(value, str),
            "curves": isinstance(value, list) and all(isinstance(x, str) for x in value),
            "metrics": isinstance(value, list) and all(isinstance(x, str) for x in value),
            "target": value is None
            or (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)),
            "lead": value in REPORT_LEAD,
            "seeds": isinstance(value, bool),
        }.get(key)
        if ok is None:
            problems.append(f"{where}: report.{key}: unknown key; valid: {', '.join(SECTION_WHAT)}")
        elif not ok:
            problems.append(f"{where}: report.{key} = {value!r}: give {SECTION_WHAT[key]}")
    return problems


def parse_baseline(text: str | None) -> tuple[str | None, str | None]:
    """``"loss_type=grpo"`` → ``("loss_type", "grpo")``; ``"grpo"`` → ``(None, "grpo")`` (a label)."""
    if not text:
        return None, None
    if "=" in text and "," not in text:
        key, value = text.split("=", 1)
        return key.strip() or None, value.strip()
    return None, text.strip()


def _baseline_pairs(text: str) -> list[tuple[str, str]] | None:
    """``"a=1, b=2"`` → ``[("a", "1"), ("b", "2")]``; None when the text is a label."""
    parts = [p.strip() for p in text.split(",")]
    if not all("=" in p for p in parts):
        return None
    return [(k.strip(), v.strip()) for k, v in (p.split("=", 1) for p in parts)]


def _keys(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(k.strip() for k in value.split(",") if k.strip())
    return tuple(value)


def _smoothing_problems(value: Any, where: str) -> list[str]:
    """The problem with a recorded ``smoothing`` setting (:func:`parse_smoothing`), if any."""
    try:
        parse_smoothing(value)
    except SmoothingError as e:
        return [f"{where}: report.smoothing = {value!r}: {e}"]
    return []


__all__ = [
    "ReportError",
    "ReportSettings",
    "check_section",
    "parse_baseline",
    "parse_smoothing",
    "parse_smoothing_text",
]
