"""The settings of a grid's report, defined once: :class:`ReportSettings`.

One schema serves three readers: the grid check of a grid file's ``report:`` section
(:func:`harness.config.spec.check_report` takes its keys, :data:`REPORT_KEYS`, and its smoothing parser),
the report itself (:mod:`analysis.report.settings`), and the ``report`` command's flags
(:func:`add_arguments`, :func:`given_in`). Each field's ``metadata`` says whether the grid file
may set it (``section``), what it takes (``what``, for messages) and its command-line flag, if any.

Imports nothing but the standard library and :mod:`harness.layout`, so planning a grid checks the
section without loading pandas, matplotlib or torch.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from harness import layout

__all__ = [
    "AUTO",
    "DYNAMICS_METRICS",
    "NORMALISE_WHAT",
    "PROGRESSION_KEYS",
    "PROGRESSION_ROW_KEYS",
    "PROGRESSION_WHAT",
    "RECENT_DYNAMICS",
    "REPORT_CI",
    "REPORT_KEYS",
    "REPORT_LEAD",
    "REPORT_SMOOTHING",
    "REPORT_X",
    "ReportError",
    "Progression",
    "ProgressionRow",
    "ReportSettings",
    "SmoothingError",
    "add_arguments",
    "given_in",
    "parse_normalise",
    "check_progression",
    "parse_progression",
    "parse_smoothing",
    "parse_smoothing_text",
]

REPORT_X = ("step", "tokens", "time")
REPORT_LEAD = ("curves", "final")
REPORT_CI = ("t", "bootstrap")
#: The smoothing settings written as a word: ``auto`` (a trailing mean over a tenth of each run's
#: logged points) and ``none``.
AUTO = "auto"
REPORT_SMOOTHING = (AUTO, "none")

#: Training-dynamics panels, in display order.
DYNAMICS_METRICS: tuple[str, ...] = (
    layout.EVAL_ACCURACY,
    "entropy",
    "kl",
    "clip_ratio/region_mean",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "completions/mean_length",
    "vespo/phi_seq_mean",
    layout.WSEQ_ESS_FRAC,
)
#: Default dynamics panels that only results recorded since their column exists have (w_seq's
#: ESS/N): drawn when a run logged them, left out without a note otherwise, so that a report of
#: older results reads as it did. Named in a grid's own ``metrics:``, a missing one is noted.
RECENT_DYNAMICS: tuple[str, ...] = (layout.WSEQ_ESS_FRAC,)

#: Keys whose value is a tuple of names (a single string counts as one name).
_TUPLES = ("hue", "col", "row", "curves", "metrics")


class ReportError(ValueError):
    """An argument of the report does not fit the results (unknown axis, bad x)."""


class SmoothingError(ValueError):
    """A smoothing setting that is not one of :data:`REPORT_SMOOTHING`, ``{window: N}`` or ``{ema: A}``.

    Attributes:
        part: ``"window"`` or ``"ema"`` when that part's number is wrong, else None.
        value: the wrong value (the number, or the whole setting).
    """

    def __init__(self, message: str, part: str | None, value: Any) -> None:
        super().__init__(message)
        self.part = part
        self.value = value


def parse_smoothing(value: Any) -> str | dict[str, int | float]:
    """A smoothing setting, normalised: ``"auto"``, ``"none"``, ``{"window": n}`` (int n >= 1, a
    trailing mean over n logged points) or ``{"ema": a}`` (float, 0 < a <= 1, the weight of the
    newest point of an exponential moving average).

    Raises:
        SmoothingError: for anything else (``{window: 2.5}``, ``{ema: 0}``, ``"hann"``).
    """
    allowed = "auto, none, {window: N} (N logged points, an integer >= 1) or {ema: A} (0 < A <= 1)"
    if isinstance(value, str) and value in REPORT_SMOOTHING:
        return value
    if isinstance(value, Mapping) and len(value) == 1:
        ((kind, n),) = value.items()
        number = isinstance(n, int | float) and not isinstance(n, bool)
        if kind == "window":
            if number and isinstance(n, int) and n >= 1:
                return {"window": n}
            raise SmoothingError(
                "the window is a number of logged points, an integer >= 1; write e.g. {window: 5}, or "
                "none for no smoothing.",
                "window",
                n,
            )
        if kind == "ema":
            if number and math.isfinite(n) and 0 < n <= 1:
                return {"ema": float(n)}
            raise SmoothingError(
                "the EMA weight of the newest point is a number with 0 < A <= 1; write e.g. {ema: 0.3}, "
                "or none for no smoothing.",
                "ema",
                n,
            )
    raise SmoothingError(f"smoothing is one of {allowed}; e.g. smoothing: {{window: 5}}.", None, value)


def parse_smoothing_text(text: str | None) -> str | dict[str, int | float] | None:
    """``auto``/``none``/``window=N``/``ema=A`` (the ``--smooth`` flag) → :func:`parse_smoothing`'s
    setting; None when not given.

    Raises:
        SmoothingError: for anything :func:`parse_smoothing` refuses, or text of another form.
    """
    if text is None:
        return None
    kind, sep, raw = text.partition("=")
    if not sep:
        return parse_smoothing(text)
    number: Any = raw
    with_int = raw.strip().lstrip("+-").isdigit()
    with contextlib.suppress(ValueError):
        number = int(raw) if with_int else float(raw)
    return parse_smoothing({kind.strip(): number})


#: What the ``normalise`` setting takes, for messages.
NORMALISE_WHAT = (
    "a mapping {low: L, high: H}, each a number or {task: number} (the ends of each task's normalised "
    "scores: low where the runs started, high the reference)"
)


def parse_normalise(value: Any) -> dict[str, Any]:
    """A ``normalise`` setting, normalised: ``{"low": L, "high": H}`` (either may be absent), each a
    float or ``{task name: float}``. The report normalises each task's scores to
    ``(score - low) / (high - low)``; a stated low is used where the runs measured no start eval,
    a stated high always (:func:`analysis.tasks.task_ranges`).

    Raises:
        ValueError: for anything else, with the fix: another key, a value that is no finite
            number (or mapping of task names to them), or a high not above the low.
    """

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"give {NORMALISE_WHAT}, e.g. normalise: {{low: 0.1, high: 1.0}}")
    out: dict[str, Any] = {}
    for end, v in value.items():
        if end not in ("low", "high"):
            raise ValueError(f"{end!r} is not an end of the range; give low and/or high")
        if number(v):
            out[str(end)] = float(v)
        elif isinstance(v, Mapping) and v and all(isinstance(t, str) and number(x) for t, x in v.items()):
            out[str(end)] = {str(t): float(x) for t, x in v.items()}
        else:
            raise ValueError(
                f"{end} = {v!r}: give a finite number, or a mapping of task names to numbers "
                f"(e.g. {end}: {{chain_sum: 0.2}})"
            )
    low, high = out.get("low"), out.get("high")
    if isinstance(low, float) and isinstance(high, float) and not high > low:
        raise ValueError(f"high {high:g} is not above low {low:g}; the reference must exceed the start")
    return out


#: What the ``progression`` setting takes, for messages.
PROGRESSION_WHAT = (
    "a mapping {metric: NAME (default eval/accuracy), rows: [{label: TEXT, select: {subgrid: NAME, KEY: "
    "VALUE, ...}}, ...]} with at least 2 rows, each adding one technique to the row above"
)
#: Keys of the ``progression`` setting, and of one of its rows (``runs``: recorded by the plan).
PROGRESSION_KEYS = ("metric", "rows")
PROGRESSION_ROW_KEYS = ("label", "select")


@dataclass(frozen=True)
class ProgressionRow:
    """One row of a progression table: a variant that adds one technique to the row above.

    Attributes:
        label: the row's name in the table (``+ Clip-Higher``).
        select: the settings that select its runs, in the findings' selector language
            (``{dotted key: value}``, ``subgrid`` for a sub-grid's name). Read-only.
        runs: the run ids the plan selected (``grid.json``); None when not recorded.
    """

    label: str
    select: Mapping[str, Any]
    runs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "select", MappingProxyType(dict(self.select)))


@dataclass(frozen=True)
class Progression:
    """The ``progression`` setting (DAPO's Table 1 shape, arXiv:2503.14476): rows in order, each
    compared with the row above on each run's final ``metric``.

    Attributes:
        rows: at least two :class:`ProgressionRow`, labels distinct.
        metric: the score compared (each run's final value, as the final-performance table scores).
    """

    rows: tuple[ProgressionRow, ...]
    metric: str = layout.EVAL_ACCURACY

    def as_json(self) -> dict[str, Any]:
        """The setting as ``grid.json`` records it: ``{metric, rows: [{label, select[, runs]}]}``."""
        rows = []
        for r in self.rows:
            row: dict[str, Any] = {"label": r.label, "select": dict(r.select)}
            if r.runs is not None:
                row["runs"] = list(r.runs)
            rows.append(row)
        return {"metric": self.metric, "rows": rows}


def parse_progression(
    value: Any, *, recorded: bool = False, where: str = "report.progression"
) -> Progression:
    """A ``progression`` setting as a :class:`Progression` (:func:`check_progression`).

    Raises:
        ValueError: every problem :func:`check_progression` finds, joined by "; ".
    """
    out, problems = check_progression(value, recorded=recorded, where=where)
    if out is None:
        raise ValueError("; ".join(problems))
    return out


def check_progression(
    value: Any, *, recorded: bool = False, where: str = "report.progression"
) -> tuple[Progression | None, list[str]]:
    """A ``progression`` setting's shape checked: a mapping of ``metric`` (a name; default
    ``eval/accuracy``) and ``rows`` (at least 2, each ``{label, select}``, labels distinct). A
    row's selector keys are checked against the grid's settings by
    :mod:`harness.config.report_check`, its runs against the plan's. ``recorded``: the form
    ``grid.json`` holds, where each row may also list its ``runs``.

    Returns:
        ``(progression, problems)``: the setting (None when there is any problem) and one sentence
        per problem, each naming ``where`` and the key, the value and the fix.
    """
    if isinstance(value, Progression):
        return value, []
    if not isinstance(value, Mapping):
        return None, [f"{where} = {value!r}: give {PROGRESSION_WHAT}."]
    problems = [
        f"{where}: unknown key {k!r}{_did_you_mean(str(k), PROGRESSION_KEYS)}; a progression has "
        f"{' and '.join(PROGRESSION_KEYS)}."
        for k in value
        if k not in PROGRESSION_KEYS
    ]
    metric = value.get("metric", layout.EVAL_ACCURACY)
    if not isinstance(metric, str) or not metric.strip():
        problems.append(f"{where}.metric = {metric!r}: give a metric name, e.g. metric: eval/accuracy.")
    rows = value.get("rows")
    if not isinstance(rows, list | tuple) or len(rows) < 2:
        n = len(rows) if isinstance(rows, list | tuple) else 0
        problems.append(
            f"{where}.rows has {n} row(s): each row is compared with the row above, so give at least 2, e.g. "
            "rows: [{label: Naive GRPO, select: {subgrid: naive}}, {label: + Clip-Higher, select: {subgrid: "
            "clip_higher}}]."
        )
    out = [_progression_row(r, f"{where}.rows[{k}]", recorded, problems) for k, r in enumerate(rows or ())]
    labels = [r.label for r in out if r is not None]
    for label in dict.fromkeys(lab for lab in labels if labels.count(lab) > 1):
        problems.append(
            f"{where}.rows: {labels.count(label)} rows are labelled {label!r}; give each row its own label."
        )
    if problems:
        return None, problems
    return Progression(rows=tuple(r for r in out if r is not None), metric=str(metric).strip()), []


def _progression_row(row: Any, where: str, recorded: bool, problems: list[str]) -> ProgressionRow | None:
    """One row of a ``progression`` setting (:func:`check_progression`), None with a problem."""
    allowed = (*PROGRESSION_ROW_KEYS, "runs") if recorded else PROGRESSION_ROW_KEYS
    if not isinstance(row, Mapping):
        problems.append(
            f"{where} = {row!r}: a row is a mapping {{label: TEXT, select: {{KEY: VALUE, ...}}}}."
        )
        return None
    found = [
        f"{where}: unknown key {k!r}{_did_you_mean(str(k), allowed)}; a row has {' and '.join(allowed)}."
        for k in row
        if k not in allowed
    ]
    label, select, runs = row.get("label"), row.get("select"), row.get("runs")
    if not isinstance(label, str) or not label.strip():
        found.append(f"{where}.label = {label!r}: give the row's name as text, e.g. label: + Clip-Higher.")
    if not isinstance(select, Mapping) or not select:
        found.append(
            f"{where}.select = {select!r}: give the settings that select the row's runs, written like grid "
            "keys, e.g. select: {subgrid: clip_higher} or select: {epsilon_high: 0.28}."
        )
    if runs is not None and not (isinstance(runs, list | tuple) and all(isinstance(r, str) for r in runs)):
        found.append(f"{where}.runs = {runs!r}: the run ids the plan selected, a list of text.")
    problems += found
    if found:
        return None
    return ProgressionRow(
        label=" ".join(label.split()), select=dict(select), runs=None if runs is None else tuple(runs)
    )


def _did_you_mean(key: str, allowed: tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for the allowed key closest to ``key``, "" when none is close."""
    import difflib

    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _setting(default: Any, what: str, *, section: bool = True, **flag: Any) -> Any:
    """A field of :class:`ReportSettings`: its default, what it takes (``what``), whether a grid
    file's ``report:`` section may set it, and its command-line flag (``flag["flag"]`` and
    ``argparse`` keywords)."""
    return field(default=default, metadata={"what": what, "section": section, **flag})


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
            ``{"window": n}`` or ``{"ema": a}`` (:func:`parse_smoothing`).
        metric: the score of the tables and final-score figures.
        curves: one curve figure per metric (default: ``metric``).
        metrics: training-dynamics panels.
        target: also tabulate the time to reach ``metric >= target``.
        lead: ``curves`` or ``final``: which figure comes first.
        seeds: also draw each run's curve faintly.
        normalise: stated ends of the tasks' normalised scores (:func:`parse_normalise`); None:
            each task's start eval up to 1.
        progression: a progression table (:class:`Progression`, :func:`parse_progression`): rows of
            runs, each adding one technique to the row above; None: none.
        ci: ``t`` or ``bootstrap`` bands.
        include_unfinished: count runs that did not finish too (marked).
        wseq_split: split the w_seq figure by this column (e.g. ``reuse_index``).
    """

    hue: tuple[str, ...] | None = _setting(
        None,
        "a setting key or a list of them",
        flag="--hue",
        help="key(s) compared as colours, comma-separated (default: loss_type)",
    )
    col: tuple[str, ...] = _setting(
        (),
        "a setting key or a list of them",
        flag="--col",
        help="key(s) faceted into panel columns, comma-separated",
    )
    row: tuple[str, ...] = _setting(
        (),
        "a setting key or a list of them",
        flag="--row",
        help="key(s) faceted into panel rows, comma-separated",
    )
    baseline: str | None = _setting(
        None,
        "KEY=VALUE[, KEY=VALUE] or a variant label",
        flag="--baseline",
        help="reference variant: KEY=VALUE[,KEY=VALUE] or a variant label (default: the grid's report "
        "section, else loss_type=grpo)",
    )
    x: str = _setting(
        "step",
        "step, tokens or time",
        flag="--x",
        choices=REPORT_X,
        help="x axis of the curves (default: step)",
    )
    smoothing: Any = _setting(
        AUTO,
        "auto, none, {window: N} (N >= 1) or {ema: A} (0 < A <= 1)",
        flag="--smooth",
        metavar="auto|none|window=N|ema=A",
        help="smoothing of each run before averaging (default: auto, a trailing mean over a tenth of each "
        "run's logged points)",
    )
    metric: str = _setting(
        "reward", "a metric name", flag="--metric", help="curve and table metric (default: reward)"
    )
    curves: tuple[str, ...] = _setting((), "a list of metric names")
    metrics: tuple[str, ...] = _setting(DYNAMICS_METRICS, "a list of metric names")
    target: float | None = _setting(
        None,
        "a finite number",
        flag="--target",
        type=float,
        help="also tabulate time to reach METRIC >= TARGET",
    )
    lead: str = _setting("curves", "curves or final")
    seeds: bool = _setting(
        False, "true or false", flag="--seeds", action="store_true", help="also draw each run faintly"
    )
    normalise: Mapping[str, Any] | None = _setting(None, NORMALISE_WHAT)
    progression: Progression | None = _setting(None, PROGRESSION_WHAT)
    ci: str = _setting(
        "t", "t or bootstrap", section=False, flag="--ci", choices=REPORT_CI, help="curve band (default: t)"
    )
    include_unfinished: bool = _setting(
        False,
        "true or false",
        section=False,
        flag="--include-unfinished",
        action="store_true",
        help="also count runs that did not finish (diverged, failed, stopped), marked",
    )
    wseq_split: str | None = _setting(
        None,
        "a column name",
        section=False,
        flag="--wseq-split",
        metavar="COLUMN",
        help="split the w_seq figure by a column, e.g. reuse_index",
    )

    @classmethod
    def merged(cls, grid_section: Mapping[str, Any] | None, **given: Any) -> ReportSettings:
        """Defaults, overridden by a grid file's ``report:`` section, overridden by ``given``
        (keyword arguments that are None count as not given). Key lists may be one string;
        ``smoothing`` is normalised by :func:`parse_smoothing`.

        Raises:
            ReportError: a key that is no setting (in either source), or a smoothing setting
                :func:`parse_smoothing` refuses.
        """
        names = [f.name for f in fields(cls)]
        values: dict[str, Any] = {}
        for source in (grid_section or {}, {k: v for k, v in given.items() if v is not None}):
            unknown = [str(k) for k in source if k not in names]
            if unknown:
                raise ReportError(
                    f"unknown report setting(s) {', '.join(unknown)}; valid: {', '.join(names)}"
                )
            for k, v in source.items():
                values[k] = _normalised(k, v)
        return replace(cls(), **values)


def _normalised(name: str, value: Any) -> Any:
    """``value`` of setting ``name`` as :class:`ReportSettings` holds it."""
    if name in _TUPLES:
        return (value,) if isinstance(value, str) else tuple(value)
    if name == "smoothing":
        try:
            return parse_smoothing(value)
        except SmoothingError as e:
            raise ReportError(f"report.smoothing = {value!r}: {e}") from e
    if name == "normalise" and value is not None:
        try:
            return parse_normalise(value)
        except ValueError as e:
            raise ReportError(f"report.normalise = {value!r}: {e}") from e
    if name == "progression" and value is not None:
        try:
            return parse_progression(value, recorded=True)
        except ValueError as e:
            raise ReportError(str(e)) from e
    return value


def _fields() -> tuple[Field, ...]:
    return fields(ReportSettings)


#: Keys of a grid file's ``report:`` section, in :class:`ReportSettings`' order.
REPORT_KEYS: tuple[str, ...] = tuple(f.name for f in _fields() if f.metadata["section"])
#: What each section key takes, for messages.
SECTION_WHAT: dict[str, str] = {f.name: f.metadata["what"] for f in _fields() if f.metadata["section"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per :class:`ReportSettings` field that has one (``--hue``, ``--smooth``, ...),
    each defaulting to None (not given: the grid's section or the default decides). Its value is
    under the field's name (:func:`given_in`); ``--smooth`` stays text until :func:`given_in`."""
    for f in _fields():
        meta = dict(f.metadata)
        flag = meta.pop("flag", None)
        if flag is None:
            continue
        meta.pop("what")
        meta.pop("section")
        parser.add_argument(flag, dest=f.name, default=None, **meta)


def given_in(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (:func:`add_arguments`), by field name; flags left out are
    absent. ``smoothing`` is parsed (:func:`parse_smoothing_text`).

    Raises:
        SmoothingError: ``--smooth`` text that is no smoothing setting.
        ReportError: ``--target`` that is not finite.
    """
    out = {f.name: getattr(args, f.name) for f in _fields() if "flag" in f.metadata}
    out = {k: v for k, v in out.items() if v is not None}
    if "smoothing" in out:
        out["smoothing"] = parse_smoothing_text(out["smoothing"])
    target = out.get("target")
    if target is not None and not math.isfinite(target):
        raise ReportError(f"--target {target}: give a finite value (e.g. 0.5)")
    return out
