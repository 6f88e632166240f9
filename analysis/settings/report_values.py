"""The values of the report's settings: their parsers (smoothing, the normalised range, a
progression) and the one check of each kind of value that :class:`analysis.settings.report.ReportSettings`
attaches to its fields.

A check takes ``(value, where, problems, rules)`` and returns the value normalised as JSON data
(a key list as a list, smoothing as :func:`parse_smoothing` writes it), or None with one sentence
per problem appended to ``problems``, each naming ``where``, the value and the fix. ``rules``
(:class:`KeyRules`) says how setting keys and selectors are checked: against a grid's settings
while the grid is planned (:mod:`harness.config.report_check` binds them), or taken as written.

Imports nothing but the standard library and :mod:`harness.layout`, so a grid's planning checks a
``report:`` section without loading pandas or matplotlib.
"""

from __future__ import annotations

import contextlib
import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from harness import layout

__all__ = [
    "AUTO",
    "NORMALISE_WHAT",
    "PROGRESSION_KEYS",
    "PROGRESSION_ROW_KEYS",
    "PROGRESSION_WHAT",
    "REPORT_CI",
    "REPORT_LEAD",
    "REPORT_SMOOTHING",
    "REPORT_X",
    "KeyRules",
    "Progression",
    "ProgressionRow",
    "ReportError",
    "SmoothingError",
    "check_baseline",
    "check_bool",
    "check_choice",
    "check_column",
    "check_metric",
    "check_metrics",
    "check_normalise",
    "check_progression",
    "check_progression_shape",
    "check_setting_keys",
    "check_smoothing",
    "check_target",
    "parse_normalise",
    "parse_progression",
    "parse_smoothing",
    "parse_smoothing_text",
    "suggest",
]

REPORT_X = ("step", "tokens", "time")
REPORT_LEAD = ("curves", "final")
REPORT_CI = ("t", "bootstrap")
#: The smoothing settings written as a word: ``auto`` (a trailing mean over a tenth of each run's
#: logged points) and ``none``.
AUTO = "auto"
REPORT_SMOOTHING = (AUTO, "none")


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


def _as_written(key: str) -> str:
    return key


def _no_problem(key: str, where: str) -> None:
    return None


def _as_written_selector(select: Any, where: str, problems: list[str]) -> Any:
    return select


@dataclass(frozen=True)
class KeyRules:
    """How a ``report:`` section's setting keys and a progression's selectors are checked.

    The default takes them as written: the section ``grid.json`` records (the grid's planning
    checked it; its progression rows list their ``runs``) and the settings given to the report.
    :mod:`harness.config.report_check` binds the grid's own rules while a grid file is loaded
    (``planning``).

    Attributes:
        planning: whether a grid file is being loaded: a baseline may not name the seed, and a
            progression's rows are checked by ``selector`` (no ``runs`` yet).
        normalize: a key as the grid writes it (``epsilon`` → ``trainer.epsilon``).
        problem: ``(dotted key, where) -> sentence or None``: why the key is no setting runs are
            compared by.
        selector: ``(selector, where, problems) -> normalised selector or None``: a progression
            row's ``select`` checked as a finding's arm (used when ``planning``).
        grid_keys: the grid's varying keys (a baseline may name them by their last part, as
            variant labels do).
    """

    planning: bool = False
    normalize: Callable[[str], str] = _as_written
    problem: Callable[[str, str], str | None] = _no_problem
    selector: Callable[[Any, str, list[str]], Any] = _as_written_selector
    grid_keys: tuple[str, ...] = ()


def suggest(word: str, options: Sequence[str]) -> str:
    """`` Did you mean 'x'?`` for the options closest to ``word`` (up to 3), "" when none is close."""
    close = difflib.get_close_matches(word, list(options), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


# --- smoothing -------------------------------------------------------------------------------------


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


def check_smoothing(value: Any, where: str, problems: list[str], rules: KeyRules) -> Any:
    """``smoothing``: :func:`parse_smoothing`'s setting, or None (a problem)."""
    try:
        return parse_smoothing(value)
    except SmoothingError as e:
        part = f".{e.part}" if e.part else ""
        problems.append(f"{where}{part} = {e.value!r}: {e}")
        return None


# --- the normalised range ----------------------------------------------------------------------------

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


def check_normalise(value: Any, where: str, problems: list[str], rules: KeyRules) -> dict[str, Any] | None:
    """``normalise``: :func:`parse_normalise`'s setting, or None (a problem)."""
    try:
        return parse_normalise(value)
    except ValueError as e:
        problems.append(f"{where} = {value!r}: {e}.")
        return None


# --- a progression -----------------------------------------------------------------------------------

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
    """A ``progression`` setting as a :class:`Progression` (:func:`check_progression_shape`).

    Raises:
        ValueError: every problem :func:`check_progression_shape` finds, joined by "; ".
    """
    out, problems = check_progression_shape(value, recorded=recorded, where=where)
    if out is None:
        raise ValueError("; ".join(problems))
    return out


def check_progression_shape(
    value: Any, *, recorded: bool = False, where: str = "report.progression"
) -> tuple[Progression | None, list[str]]:
    """A ``progression`` setting's shape checked: a mapping of ``metric`` (a name; default
    ``eval/accuracy``) and ``rows`` (at least 2, each ``{label, select}``, labels distinct). A
    row's selector keys are checked against the grid's settings by :func:`check_progression`, its
    runs against the plan's by :mod:`harness.config.report_check`. ``recorded``: the form
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
    """One row of a ``progression`` setting (:func:`check_progression_shape`), None with a problem."""
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
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_progression(value: Any, where: str, problems: list[str], rules: KeyRules) -> dict[str, Any] | None:
    """``progression``: its shape (:func:`check_progression_shape`), the metric a name
    (:func:`check_metric`), each row's selector by ``rules.selector`` (a finding's arm's check); as
    JSON data with the selectors normalised, or None (problems). Outside ``rules.planning`` (the
    recorded form) the rows keep their selectors as written and their ``runs``."""
    recorded = not rules.planning
    checked, found = check_progression_shape(value, recorded=recorded, where=where)
    problems += found
    metric = value.get("metric", layout.EVAL_ACCURACY) if isinstance(value, Mapping) else None
    ok = checked is not None
    if isinstance(metric, str) and metric.strip():
        ok = check_metric(metric, f"{where}.metric", problems, rules) is not None and ok
    if recorded:
        return checked.as_json() if ok and checked is not None else None
    raw = value.get("rows") if isinstance(value, Mapping) else None
    selects = []
    for k, row in enumerate(raw if isinstance(raw, list | tuple) else ()):
        select = row.get("select") if isinstance(row, Mapping) else None
        if isinstance(select, Mapping) and select:  # an empty or missing one: the shape's check says so
            select = rules.selector(select, f"{where}.rows[{k}].select", problems)
            ok = ok and select is not None
        selects.append(select)
    if not ok or checked is None:
        return None
    rows = [{"label": r.label, "select": sel} for r, sel in zip(checked.rows, selects, strict=True)]
    return {"metric": checked.metric, "rows": rows}


# --- keys, names and numbers -------------------------------------------------------------------------


def check_setting_keys(value: Any, where: str, problems: list[str], rules: KeyRules) -> list[str] | None:
    """``hue``/``col``/``row``: a setting key or a list of them, as dotted keys; outside
    ``rules.planning`` an empty list is none (``col=()`` given to the report: no panel columns)."""
    if not rules.planning and isinstance(value, list | tuple) and not value:
        return []
    raw = [value] if isinstance(value, str) else value
    if not isinstance(raw, list | tuple) or not raw or not all(isinstance(k, str) and k.strip() for k in raw):
        problems.append(
            f"{where} = {value!r}: give a setting key or a non-empty list of them, written like grid "
            "keys (epsilon, task.kwargs.max_digits, seed), e.g. [epsilon, epsilon_high]; null for none."
        )
        return None
    keys: list[str] = []
    ok = True
    for k in raw:
        key = rules.normalize(k.strip())
        problem = rules.problem(key, where)
        if problem is None and key in keys:
            problem = f"{where}: {key} is given twice (bare and dotted names are one key); give it once."
        if problem:
            problems.append(problem)
            ok = False
        else:
            keys.append(key)
    return keys if ok else None


def check_baseline(value: Any, where: str, problems: list[str], rules: KeyRules) -> str | None:
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
    short = {k.rsplit(".", 1)[-1] for k in rules.grid_keys}
    parts = []
    ok = True
    for part in text.split(","):
        k, sep, v = (s.strip() for s in part.partition("="))
        if not sep or not k or not v:
            problems.append(f"{where} = {value!r}: {part.strip()!r} is not KEY=VALUE; {fix}.")
            ok = False
            continue
        problem = None if k in short else rules.problem(rules.normalize(k), where)
        if rules.normalize(k) in (rules.normalize(p.split("=", 1)[0]) for p in parts):
            problem = f"{where} = {value!r}: {k} is given twice; a baseline names one value per key."
        elif k == "seed" and rules.planning:
            problem = (
                f"{where} = {value!r}: seed cannot name the baseline: a variant pools its seeds (each seed "
                "is one run of its interval); name the settings the variants differ in."
            )
        if problem:
            problems.append(problem)
            ok = False
        parts.append(f"{k}={v}")
    return ", ".join(parts) if ok else None


def check_target(value: Any, where: str, problems: list[str], rules: KeyRules) -> float | None:
    """``target``: a finite number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and _is_number(value) and math.isfinite(float(value)):
        fix = f"write it bare: target: {float(value)!r}"
    else:
        fix = "write e.g. target: 0.9 (the metric value runs must reach), or leave it out"
    problems.append(f"{where} = {value!r}: the target is a finite number; {fix}.")
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_metric(value: Any, where: str, problems: list[str], rules: KeyRules) -> str | None:
    """``metric``: a metric name (a pass@k column's k a positive integer)."""
    if isinstance(value, str) and value.strip():
        return value.strip() if _pass_at_k_ok(value.strip(), where, problems) else None
    problems.append(f"{where} = {value!r}: give a metric name, e.g. reward or eval/accuracy.")
    return None


def check_metrics(value: Any, where: str, problems: list[str], rules: KeyRules) -> list[str] | None:
    """``curves``/``metrics``: a list of metric names, each once."""
    if not isinstance(value, list | tuple) or not all(isinstance(m, str) and m.strip() for m in value):
        example = f"[{value}]" if isinstance(value, str) else "[reward, eval/accuracy]"
        problems.append(f"{where} = {value!r}: give a list of metric names, e.g. {example}.")
        return None
    names = [m.strip() for m in value]
    if not all([_pass_at_k_ok(m, where, problems) for m in names]):
        return None
    twice = sorted({m for m in names if names.count(m) > 1})
    if twice:
        problems.append(f"{where}: {', '.join(twice)} is listed more than once; list each metric once.")
        return None
    return names


def _pass_at_k_ok(name: str, where: str, problems: list[str]) -> bool:
    """Whether a metric name that starts like a pass@k column (``eval/pass@``) names one, ``k`` a
    positive integer (:func:`harness.layout.pass_at_k`); a problem otherwise."""
    if not name.startswith(layout.PASS_AT_PREFIX) or layout.pass_at_k(name) is not None:
        return True
    problems.append(
        f"{where}: {name!r} is no pass@k column: k is a positive integer, one of 1, 2, 4, ... up to the "
        f"samples per prompt n, or n itself; write e.g. {layout.PASS_AT_PREFIX}4."
    )
    return False


def check_choice(choices: Sequence[str], what: str) -> Callable[[Any, str, list[str], KeyRules], Any]:
    """The check of a setting that is one of ``choices`` (``what`` names it in messages)."""

    def check(value: Any, where: str, problems: list[str], rules: KeyRules) -> Any:
        if isinstance(value, str) and value in choices:
            return value
        name = where.rsplit(".", 1)[-1].lstrip("-")
        example = f"-o report.{name}={choices[0]}" if where.startswith("-o") else f"{name}: {choices[0]}"
        problems.append(f"{where} = {value!r}: {what} is one of {', '.join(choices)}; write e.g. {example}.")
        return None

    return check


def check_bool(what: str) -> Callable[[Any, str, list[str], KeyRules], Any]:
    """The check of a setting that is true or false (``what``: what true does, for messages)."""

    def check(value: Any, where: str, problems: list[str], rules: KeyRules) -> bool | None:
        if isinstance(value, bool):
            return value
        name = where.rsplit(".", 1)[-1].lstrip("-")
        problems.append(f"{where} = {value!r}: {name} is true or false ({what}).")
        return None

    return check


def check_column(value: Any, where: str, problems: list[str], rules: KeyRules) -> str | None:
    """A column name (``wseq_split``): a non-empty string."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    problems.append(f"{where} = {value!r}: give a column name, e.g. reuse_index.")
    return None
