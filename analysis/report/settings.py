"""The ``report:`` section's settings (:class:`ReportSettings`), its check, and the parsing of
the baseline and smoothing settings."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from analysis import aggregate as agg_mod
from analysis.curves import DYNAMICS_METRICS


class ReportError(ValueError):
    """An argument of the report does not fit the results (unknown axis, bad x)."""


_X_CHOICES = ("step", "tokens", "time")


@dataclass(frozen=True)
class ReportSettings:
    """How a report is laid out. Keys are dotted config keys (``trainer.epsilon``), an alias
    (``loss_type``) or a key's last component.

    Attributes:
        hue: keys whose values are the compared variants (colours); None: ``loss_type`` when it
            varies, else every key that differs.
        col, row: keys faceted into panel columns / rows.
        baseline: ``KEY=VALUE[, KEY=VALUE]`` or a variant label; None: ``loss_type=grpo`` when
            such runs exist (without a note when they do not).
        x: ``step``, ``tokens`` or ``time``.
        smoothing: ``auto`` (trailing mean over a tenth of each run's points), ``none``,
            ``{"window": n}`` or ``{"ema": a}``.
        metric: the score of the tables and final-score figures.
        curves: one curve figure per metric (default: ``metric``).
        metrics: training-dynamics panels.
        target: also tabulate the time to reach ``metric >= target``.
        lead: ``curves`` or ``final``: which figure comes first.
        seeds: also draw each run's curve faintly.
        ci: ``t`` or ``bootstrap`` bands.
        include_unfinished: count runs that did not finish too (marked).
        wseq_split: split the w_seq figure by this column (e.g. ``reuse_index``).
    """

    hue: tuple[str, ...] | None = None
    col: tuple[str, ...] = ()
    row: tuple[str, ...] = ()
    baseline: str | None = None
    x: str = "step"
    smoothing: Any = agg_mod.AUTO
    metric: str = "reward"
    curves: tuple[str, ...] = ()
    metrics: tuple[str, ...] = DYNAMICS_METRICS
    target: float | None = None
    lead: str = "curves"
    seeds: bool = False
    ci: str = "t"
    include_unfinished: bool = False
    wseq_split: str | None = None

    @classmethod
    def merged(cls, grid_section: Mapping[str, Any] | None, **given: Any) -> ReportSettings:
        """Defaults, overridden by a grid file's ``report:`` section, overridden by ``given``
        (keyword arguments that are None count as not given)."""
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for source in (grid_section or {}, {k: v for k, v in given.items() if v is not None}):
            for k, v in source.items():
                if k not in names:
                    continue
                if k in ("hue", "col", "row", "curves", "metrics"):
                    v = (v,) if isinstance(v, str) else tuple(v)
                values[k] = v
        return replace(cls(), **values)


#: The grid file's ``report:`` keys and what each takes (``grpo-harness plan`` checks them in the
#: grid file; a ``grid.json`` edited by hand or from another version is checked again here).
_SECTION_KEYS: dict[str, str] = {
    "hue": "a setting key or a list of them",
    "col": "a setting key or a list of them",
    "row": "a setting key or a list of them",
    "baseline": "KEY=VALUE[, KEY=VALUE] or a variant label",
    "x": "step, tokens or time",
    "smoothing": "auto, none, {window: N} (N >= 1) or {ema: A} (0 < A <= 1)",
    "metric": "a metric name",
    "curves": "a list of metric names",
    "metrics": "a list of metric names",
    "target": "a finite number",
    "lead": "curves or final",
    "seeds": "true or false",
}


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
            f"{where}: report is {type(section).__name__}, not a mapping of layout keys ({', '.join(_SECTION_KEYS)})"
        ]
    problems = []

    def names(v: Any) -> bool:
        return isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))

    for key, value in section.items():
        ok = {
            "hue": names(value) and bool(value),
            "col": names(value),
            "row": names(value),
            "baseline": isinstance(value, str) or value is None,
            "x": value in _X_CHOICES,
            "smoothing": _smoothing_ok(value),
            "metric": isinstance(value, str),
            "curves": isinstance(value, list) and all(isinstance(x, str) for x in value),
            "metrics": isinstance(value, list) and all(isinstance(x, str) for x in value),
            "target": value is None
            or (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)),
            "lead": value in ("curves", "final"),
            "seeds": isinstance(value, bool),
        }.get(key)
        if ok is None:
            problems.append(f"{where}: report.{key}: unknown key; valid: {', '.join(_SECTION_KEYS)}")
        elif not ok:
            problems.append(f"{where}: report.{key} = {value!r}: give {_SECTION_KEYS[key]}")
    return problems


def _smoothing_ok(value: Any) -> bool:
    try:
        agg_mod.resolve_smoothing(value, 10)
    except (TypeError, ValueError):
        return False
    return True


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


def parse_smoothing(text: str | None) -> Any:
    """``auto``/``none``/``window=N``/``ema=A`` → a smoothing setting; None when not given.

    Raises:
        ValueError: for anything else.
    """
    if text is None:
        return None
    if text in ("auto", "none"):
        return text
    kind, _, value = text.partition("=")
    if kind == "window":
        if value.isdigit() and int(value) >= 1:
            return {"window": int(value)}
        raise ValueError(
            f"the window is a whole number of logged points, at least 1 (e.g. window=20), got {value!r}"
        )
    if kind == "ema":
        try:
            a = float(value)
        except ValueError:
            a = float("nan")
        if 0 < a <= 1:
            return {"ema": a}
        raise ValueError(
            f"the EMA weight of the newest point must be in (0, 1] (e.g. ema=0.1; smaller is smoother), got {value!r}"
        )
    raise ValueError("use auto, none, window=N (e.g. window=20) or ema=A (e.g. ema=0.1)")
