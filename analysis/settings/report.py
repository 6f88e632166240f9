"""The report's settings, defined once: :class:`ReportSettings`.

Each field says its type and default, what it does (``help``), what it takes (``what``, for
messages), the one check of its value (:mod:`analysis.settings.report_values`), whether a grid file's
``report:`` section may set it and its command-line flag, if any. Everything else is derived from
the fields:

* the grid check of a ``report:`` section (:func:`check_section`, bound to a grid's keys by
  :mod:`harness.config.report_check`) and the check of the section ``grid.json`` recorded
  (:func:`recorded_problems`);
* the ``report`` command's flags (:func:`add_arguments`, :func:`given_in`);
* the keyword arguments of :func:`analysis.report.make_report` and the settings a report uses
  (:meth:`ReportSettings.merged`: defaults, then the section, then what was given).

A new setting is a new field (:func:`setting`) and the code that reads it. Imports nothing but the
standard library and :mod:`harness.layout`, so planning a grid checks the section without loading
pandas, matplotlib or torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

from analysis.settings.report_values import (
    AUTO,
    NORMALISE_WHAT,
    PROGRESSION_WHAT,
    REPORT_CI,
    REPORT_LEAD,
    REPORT_X,
    KeyRules,
    Progression,
    ReportError,
    SmoothingError,
    check_baseline,
    check_bool,
    check_choice,
    check_column,
    check_metric,
    check_metrics,
    check_normalise,
    check_progression,
    check_setting_keys,
    check_smoothing,
    check_target,
    parse_progression,
    parse_smoothing,
    parse_smoothing_text,
    suggest,
)
from harness import layout

__all__ = [
    "DYNAMICS_METRICS",
    "RECENT_DYNAMICS",
    "REPORT_KEYS",
    "SECTION_WHAT",
    "KeyRules",
    "Progression",
    "ReportError",
    "ReportSettings",
    "SmoothingError",
    "add_arguments",
    "baseline_pairs",
    "check_section",
    "describe",
    "given_in",
    "given_keys",
    "key_list",
    "parse_baseline",
    "parse_smoothing",
    "parse_smoothing_text",
    "recorded_problems",
    "setting",
]

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

#: A check of a setting's value: ``(value, where, problems, rules) -> normalised value or None``.
Check = Callable[[Any, str, list[str], KeyRules], Any]


def key_list(value: Any) -> tuple[str, ...] | None:
    """Setting keys as a tuple: one key, keys joined by commas (``"a,b"``, the command line's
    form) or a list of either; None stays None (no setting key holds a comma)."""
    if value is None:
        return None
    parts = [value] if isinstance(value, str) else list(value)
    return tuple(k.strip() for part in parts for k in str(part).split(",") if k.strip())


def _as_is(value: Any) -> Any:
    return value


def _recorded_progression(value: Any) -> Progression:
    return parse_progression(value, recorded=True)


def setting(
    default: Any,
    *,
    help: str,
    what: str,
    check: Check,
    section: bool = True,
    flag: str | None = None,
    held: Callable[[Any], Any] = _as_is,
    from_flag: Callable[[Any], Any] | None = None,
    **argparse_keywords: Any,
) -> Any:
    """A field of :class:`ReportSettings`.

    Args:
        default: its value when neither the grid's section nor the caller gives one.
        help: what it does (the flag's help, the docs).
        what: what it takes, for messages ("a setting key or a list of them").
        check: the check of a value (:mod:`analysis.settings.report_values`), shared by the grid check, the
            check of ``grid.json``'s section, the flags and :meth:`ReportSettings.merged`.
        section: whether a grid file's ``report:`` section may set it.
        flag: its command-line flag (``--hue``), None for none; ``argparse_keywords`` go to
            ``add_argument`` (``choices``, ``type``, ``action``, ``metavar``).
        held: the checked value as the settings hold it (a key list as a tuple).
        from_flag: the flag's text as a value (``--smooth window=3`` → ``{"window": 3}``).
    """
    meta = {"help": help, "what": what, "check": check, "section": section, "held": held}
    if flag is not None:
        meta.update(flag=flag, from_flag=from_flag, argparse=argparse_keywords)
    return field(default=default, metadata=meta)


_KEYS_WHAT = "a setting key or a list of them"
_NAMES_WHAT = "a list of metric names"


@dataclass(frozen=True)
class ReportSettings:
    """How a report is laid out and what it counts; each field's ``help`` says what it does
    (:func:`describe`). Keys are dotted config keys (``trainer.epsilon``), an alias
    (``loss_type``) or a key's last component.

    Attributes:
        hue, col, row: key tuples (``hue`` None: ``loss_type`` when it varies, else every key
            that differs).
        baseline: ``KEY=VALUE[, KEY=VALUE]`` or a variant label; None: ``loss_type=grpo``.
        x: one of :data:`analysis.settings.report_values.REPORT_X`.
        smoothing: ``"auto"``, ``"none"``, ``{"window": n}`` or ``{"ema": a}``.
        metric: a metric name; curves, metrics: metric-name tuples.
        target: a finite number or None.
        lead: one of :data:`analysis.settings.report_values.REPORT_LEAD`.
        seeds, include_unfinished: bools.
        normalise: ``{"low": ..., "high": ...}`` (:func:`analysis.settings.report_values.parse_normalise`)
            or None.
        progression: a :class:`Progression` or None.
        ci: one of :data:`analysis.settings.report_values.REPORT_CI`.
        wseq_split: a column name or None.
    """

    hue: tuple[str, ...] | None = setting(
        None,
        help="key(s) compared as colours, comma-separated (default: loss_type)",
        what=_KEYS_WHAT,
        check=check_setting_keys,
        held=key_list,
        flag="--hue",
    )
    col: tuple[str, ...] = setting(
        (),
        help="key(s) faceted into panel columns, comma-separated",
        what=_KEYS_WHAT,
        check=check_setting_keys,
        held=key_list,
        flag="--col",
    )
    row: tuple[str, ...] = setting(
        (),
        help="key(s) faceted into panel rows, comma-separated",
        what=_KEYS_WHAT,
        check=check_setting_keys,
        held=key_list,
        flag="--row",
    )
    baseline: str | None = setting(
        None,
        help="reference variant: KEY=VALUE[,KEY=VALUE] or a variant label (default: the grid's report "
        "section, else loss_type=grpo)",
        what="KEY=VALUE[, KEY=VALUE] or a variant label",
        check=check_baseline,
        flag="--baseline",
    )
    x: str = setting(
        "step",
        help="x axis of the curves (default: step)",
        what="step, tokens or time",
        check=check_choice(REPORT_X, "the x axis"),
        flag="--x",
        choices=REPORT_X,
    )
    smoothing: Any = setting(
        AUTO,
        help="smoothing of each run before averaging (default: auto, a trailing mean over a tenth of each "
        "run's logged points)",
        what="auto, none, {window: N} (N >= 1) or {ema: A} (0 < A <= 1)",
        check=check_smoothing,
        flag="--smooth",
        from_flag=parse_smoothing_text,
        metavar="auto|none|window=N|ema=A",
    )
    metric: str = setting(
        "reward",
        help="curve and table metric (default: reward)",
        what="a metric name",
        check=check_metric,
        flag="--metric",
    )
    curves: tuple[str, ...] = setting(
        (),
        help="one curve figure per metric (default: the metric's)",
        what=_NAMES_WHAT,
        check=check_metrics,
        held=tuple,
    )
    metrics: tuple[str, ...] = setting(
        DYNAMICS_METRICS,
        help="the training-dynamics panels",
        what=_NAMES_WHAT,
        check=check_metrics,
        held=tuple,
    )
    target: float | None = setting(
        None,
        help="also tabulate time to reach METRIC >= TARGET",
        what="a finite number",
        check=check_target,
        flag="--target",
        type=float,
    )
    lead: str = setting(
        "curves",
        help="which figure comes first: the curves or the final scores",
        what="curves or final",
        check=check_choice(REPORT_LEAD, "the figure shown first"),
    )
    seeds: bool = setting(
        False,
        help="also draw each run faintly",
        what="true or false",
        check=check_bool("draw each run faintly"),
        flag="--seeds",
        action="store_true",
    )
    normalise: Mapping[str, Any] | None = setting(
        None,
        help="the stated ends of the tasks' normalised scores (default: each task's start eval up to 1)",
        what=NORMALISE_WHAT,
        check=check_normalise,
    )
    progression: Progression | None = setting(
        None,
        help="rows of runs, each adding one technique to the row above, tabulated in DAPO's Table 1 shape",
        what=PROGRESSION_WHAT,
        check=check_progression,
        held=_recorded_progression,
    )
    ci: str = setting(
        "t",
        help="curve band (default: t)",
        what="t or bootstrap",
        check=check_choice(REPORT_CI, "the curve band"),
        section=False,
        flag="--ci",
        choices=REPORT_CI,
    )
    include_unfinished: bool = setting(
        False,
        help="also count runs that did not finish (diverged, failed, stopped), marked",
        what="true or false",
        check=check_bool("count the runs that did not finish too"),
        section=False,
        flag="--include-unfinished",
        action="store_true",
    )
    wseq_split: str | None = setting(
        None,
        help="split the w_seq figure by a column, e.g. reuse_index",
        what="a column name",
        check=check_column,
        section=False,
        flag="--wseq-split",
        metavar="COLUMN",
    )

    @classmethod
    def merged(cls, grid_section: Mapping[str, Any] | None, **given: Any) -> ReportSettings:
        """Defaults, overridden by a grid file's ``report:`` section, overridden by ``given``
        (keyword arguments that are None count as not given). Each value is checked by its field's
        check (keys taken as written) and held as the field holds it: key lists may be one string,
        or keys joined by commas; ``smoothing`` is normalised by :func:`parse_smoothing`.

        Raises:
            ReportError: a key that is no setting (in either source), or a value its field's check
                refuses (every problem, joined by "; ").
        """
        fs = _fields()
        values: dict[str, Any] = {}
        given = {k: v for k, v in given.items() if v is not None}
        for source, prefix in ((grid_section or {}, "report."), (given, "")):
            unknown = [str(k) for k in source if k not in fs]
            if unknown:
                raise ReportError(f"unknown report setting(s) {', '.join(unknown)}; valid: {', '.join(fs)}")
            problems: list[str] = []
            for name, value in source.items():
                if value is None:
                    continue
                checked = fs[name].metadata["check"](value, f"{prefix}{name}", problems, KeyRules())
                if checked is not None:
                    values[name] = fs[name].metadata["held"](checked)
            if problems:
                raise ReportError("; ".join(problems))
        return replace(cls(), **values)


def _fields() -> dict[str, Field]:
    return {f.name: f for f in fields(ReportSettings)}


def describe(name: str) -> str:
    """What setting ``name`` does (its ``help``).

    Raises:
        KeyError: ``name`` is no setting.
    """
    return _fields()[name].metadata["help"]


#: Keys of a grid file's ``report:`` section, in :class:`ReportSettings`' order.
REPORT_KEYS: tuple[str, ...] = tuple(n for n, f in _fields().items() if f.metadata["section"])
#: What each section key takes, for messages.
SECTION_WHAT: dict[str, str] = {n: _fields()[n].metadata["what"] for n in REPORT_KEYS}


def check_section(
    section: Any,
    problems: list[str],
    *,
    given_at: Mapping[str, str] | None = None,
    rules: KeyRules | None = None,
    prefix: str = "",
) -> dict[str, Any]:
    """A ``report:`` section checked and normalised, as JSON data; problems go to ``problems``.

    Each key's value goes through its field's check: ``hue``/``col``/``row`` become lists of
    setting keys (dotted by ``rules``); ``smoothing`` one of "auto", "none", ``{"window": n}``,
    ``{"ema": a}``; ``target`` a float. Keys left out or null are absent; the result lists the keys
    in :data:`REPORT_KEYS`' order.

    Args:
        section: the section (None: none).
        problems: where each problem goes, one sentence each naming where, the value and the fix.
        given_at: where a key was set when not in the file (``-o report.x``,
            ``profiles.quick.report.hue``); default ``report.<key>``.
        rules: how setting keys and selectors are checked (:class:`KeyRules`; default as written).
        prefix: put before each ``report.<key>`` (a file's name and ": ").
    """
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problems.append(
            f"{prefix}report = {section!r}: report is a mapping of layout keys ({', '.join(REPORT_KEYS)}), "
            "e.g. report: {hue: loss_type, x: tokens}."
        )
        return {}
    given_at = given_at or {}
    rules = rules or KeyRules()
    fs = _fields()
    out: dict[str, Any] = {}
    for name, value in section.items():
        where = given_at.get(name, f"{prefix}report.{name}")
        if name not in REPORT_KEYS:
            problems.append(
                f"{where}: unknown report key '{name}'.{suggest(str(name), REPORT_KEYS)} "
                f"Valid: {', '.join(REPORT_KEYS)}."
            )
            continue
        if value is None:
            continue
        checked = fs[name].metadata["check"](value, where, problems, rules)
        if checked is not None:
            out[name] = checked
    return {k: out[k] for k in REPORT_KEYS if k in out}


def recorded_problems(section: Any, where: str) -> list[str]:
    """Problems with a ``report:`` section as recorded in ``grid.json`` (empty list: none), each
    starting with ``where`` (the file); keys as written, a progression's rows with their ``runs``."""
    problems: list[str] = []
    check_section(section, problems, prefix=f"{where}: ")
    return problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per :class:`ReportSettings` field that has one (``--hue``, ``--smooth``, ...),
    each defaulting to None (not given: the grid's section or the default decides). Its value is
    under the field's name (:func:`given_in`); ``--smooth`` stays text until :func:`given_in`."""
    for f in _fields().values():
        if "flag" in f.metadata:
            parser.add_argument(
                f.metadata["flag"],
                dest=f.name,
                default=None,
                help=f.metadata["help"],
                **f.metadata["argparse"],
            )


def given_in(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (:func:`add_arguments`), by field name; flags left out are
    absent. A flag's text is read as its field reads it (``--smooth window=3`` →
    ``{"window": 3}``); key lists stay as typed (``"a,b"``).

    Raises:
        SmoothingError: ``--smooth`` text that is no smoothing setting.
        ReportError: a value its field's check refuses (``--target nan``), naming the flag.
    """
    out: dict[str, Any] = {}
    problems: list[str] = []
    for f in _fields().values():
        value = getattr(args, f.name, None) if "flag" in f.metadata else None
        if value is None:
            continue
        read = f.metadata["from_flag"]
        out[f.name] = read(value) if read is not None else value
        f.metadata["check"](out[f.name], f.metadata["flag"], problems, KeyRules())
    if problems:
        raise ReportError("; ".join(problems))
    return out


def given_keys(given: Mapping[str, Any]) -> set[str]:
    """The setting keys that given settings name as colours or panels (``hue``, ``col``, ``row``):
    each must name a column of the results (a grid's own section may name a key no run sets)."""
    return {k for name in ("hue", "col", "row") for k in key_list(given.get(name)) or ()}


def parse_baseline(text: str | None) -> tuple[str | None, str | None]:
    """``"loss_type=grpo"`` → ``("loss_type", "grpo")``; ``"grpo"`` → ``(None, "grpo")`` (a label)."""
    if not text:
        return None, None
    if "=" in text and "," not in text:
        key, value = text.split("=", 1)
        return key.strip() or None, value.strip()
    return None, text.strip()


def baseline_pairs(text: str) -> list[tuple[str, str]] | None:
    """``"a=1, b=2"`` → ``[("a", "1"), ("b", "2")]``; None when the text is a label."""
    parts = [p.strip() for p in text.split(",")]
    if not all("=" in p for p in parts):
        return None
    return [(k.strip(), v.strip()) for k, v in (p.split("=", 1) for p in parts)]
