"""The ``findings:`` section of a grid file as the analysis reads it: claims of papers that the
grid's runs put to the test.

A grid may state, beside its runs, what a paper found and which of its runs test it::

    findings:
      F1_clip_higher:
        claim: Under off-policy updates, epsilon_high = 0.28 keeps token entropy higher than 0.2.
        paper: DAPO, arXiv:2503.14476, §3.1 and Fig. 2
        metric: entropy              # a per-step metric column of the runs' parquet
        window: [0.5, 1.0]           # fraction of each run's logged steps averaged (nan-mean)
        direction: higher            # higher | lower: the variant's metric against the baseline's
        baseline: {epsilon_high: 0.2, num_iterations: 4}    # settings that select the baseline's runs
        variant: {epsilon_high: 0.28, num_iterations: 4}    # settings that select the variant's runs
        scaled: "what was scaled from the paper's setting, and how"   # optional
        off_policy_only: false       # optional: only rows with off_policy == 1 count

``measure`` (optional) says what each run's value is: ``window`` (the default, as above),
``to_target`` (the steps, or with ``x: tokens`` the generated tokens, until a run's metric first
reaches ``target``: a number, or ``baseline``, the baseline arm's mean over ``window``), or
``from_start`` (each run's end, its mean over ``window``, minus its own starting policy's value in
``eval_start.json``; then ``baseline: start`` and no baseline arm). A *dose-response* finding gives
``dose: {key, values, scale}`` and ``arms`` (the settings every value's runs share) instead of
``baseline`` and ``variant``: one level of runs per value (:mod:`analysis.settings.finding_dose`).
See docs/findings.md.

Like ``report:``, the section is no run setting: no run id depends on it. This module owns its
vocabulary (the keys, the measures, the directions, :data:`SUBGRID`), its shape check
(:func:`check_findings`, each problem with the file, key, value and fix), the selector language a
finding's arms and a progression's rows share (:func:`check_selector`, :func:`selects`,
:func:`arm_runs`) and what ``grid.json`` keeps of the section (:func:`record`: each arm's run ids,
so the report and ``grpo-harness findings`` need neither the YAML nor a second matching). A
selector's keys and values are the grid's: they are checked with the grid's key language, which
planning owns and passes in (:class:`analysis.settings.keys.SettingKeys`,
:mod:`harness.config.keys`). Planning calls the checks when the grid is loaded and holds the arms
against the expanded runs (:mod:`harness.config.findings`); the verdicts are computed in :mod:`analysis.findings`.

Imports nothing of the project but :mod:`harness.settings`, and nothing heavy, so planning a grid
takes it without loading the analysis.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from analysis.settings.finding_dose import DOSE_REQUIRED, check_dose, level_selectors
from analysis.settings.keys import SettingKeys
from harness.settings.schema import canonical_json

#: Keys of one finding, in the order they are shown.
FINDING_KEYS = (
    "claim",
    "paper",
    "metric",
    "window",
    "direction",
    "baseline",
    "variant",
    "scaled",
    "off_policy_only",
    "measure",
    "target",
    "x",
    "dose",
    "arms",
)
#: The keys of a checked finding, in order: a dose-response finding's ``arms`` (its shared selector)
#: is kept as ``select``, since ``grid.json``'s ``arms`` are run ids (:func:`record`).
_CHECKED_KEYS = tuple("select" if k == "arms" else k for k in FINDING_KEYS)
REQUIRED_KEYS = ("claim", "paper", "metric", "window", "direction", "baseline", "variant")
DIRECTIONS = ("higher", "lower")
ARMS = ("baseline", "variant")
#: What a finding measures per run (analysis.finding_measures.MEASURES: the analysis reads the
#: same three, and tests/test_findings_measures.py checks the two agree).
WINDOW, TO_TARGET, FROM_START = "window", "to_target", "from_start"
MEASURES = (WINDOW, TO_TARGET, FROM_START)
#: A to_target finding's x: optimizer steps, or the completion tokens generated so far.
X_UNITS = ("step", "tokens")
#: ``baseline: start`` (from_start): each run's own starting policy; ``target: baseline``
#: (to_target): the baseline arm's mean of its runs' window means.
START, BASELINE_TARGET = "start", "baseline"

#: What to write for each required key left out.
_MISSING_FIX = {
    "claim": "give the paper's claim in one sentence, e.g. claim: epsilon_high = 0.28 keeps entropy higher",
    "paper": "name the paper and where it says so, e.g. paper: DAPO, arXiv:2503.14476, §3.1",
    "metric": "name a per-step metric column of the runs, e.g. metric: entropy",
    "window": "give the fractions of each run's logged steps to average over, e.g. window: [0.5, 1.0]",
    "direction": "say what the paper finds for the variant against the baseline: direction: higher or lower",
    "baseline": "give the settings that select the baseline's runs, e.g. baseline: {epsilon_high: 0.2}",
    "variant": "give the settings that select the variant's runs, e.g. variant: {epsilon_high: 0.28}",
    "dose": (
        "arms gives the settings that every level of a dose-response finding shares; give the levels too, "
        "e.g. dose: {key: epsilon_high, values: [0.2, 0.28, 0.4, 0.8]}, or give baseline and variant instead "
        "of arms"
    ),
    "arms": (
        "give the settings that every level's runs share, e.g. arms: {subgrid: f1_clip_higher} (each value "
        "of dose.key adds its own)"
    ),
    "target": (
        "give the level each run must reach: target: baseline (the baseline arm's mean over window) or a "
        "number, e.g. target: 0.6"
    ),
}
#: What to write for a key left out that a measure needs in its own way.
_MISSING_FIX_OF = {
    (FROM_START, "baseline"): "with measure: from_start write baseline: start (each run against its own "
    "starting policy, from eval_start.json)",
    (TO_TARGET, "window"): "with target: baseline give the window of the baseline's runs whose mean is the "
    "target, e.g. window: [0.9, 1.0] (their final level)",
}

_UNSET = object()
#: A selector key that is no setting: the name of the sub-grid a run came from (for a run that two
#: sub-grids both make, the first of them, as the plan keeps it). It tells apart arms whose settings
#: differ only through a profile, e.g. a control at learning rate 0 and a baseline at the grid's own.
SUBGRID = "subgrid"


def check_findings(
    section: Any,
    problems: list[str],
    keys: SettingKeys,
    origin: Callable[[str], str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The ``findings:`` section checked and normalised, as JSON data; problems go to ``problems``.

    Each finding becomes ``{claim, paper, metric, window: [a, b] (floats), direction, baseline,
    variant (selectors: {dotted key: value}, bare GRPOConfig names as ``trainer.<name>``, numbers
    coerced to their field's type as grid values are), scaled (``""`` when left out),
    off_policy_only (bool)}``. A finding with any problem is left out of the result.

    Args:
        section: the file's ``findings:`` value (None: no findings).
        problems: where each problem is added, as a sentence naming the key, the value and the fix.
        keys: the grid's key language, which checks the selectors' keys and values.
        origin: finding id -> a sentence naming the included file it comes from ("" when none),
            added to each of its problems.

    Returns:
        ``{finding id: finding}`` in the file's order.
    """
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problems.append(
            f"findings = {_shown(section)}: findings is a mapping of finding id -> "
            f"{{{', '.join(REQUIRED_KEYS)}}}; see docs/findings.md."
        )
        return {}
    out = {}
    for fid, finding in section.items():
        where = f"findings.{fid}"
        found: list[str] = []
        checked = _check_finding(finding, where, found, keys)
        if found and origin is not None:
            found = [p + origin(str(fid)) for p in found]
        problems += found
        if checked is not None and not found:
            out[str(fid)] = checked
    return out


def _check_finding(finding: Any, where: str, problems: list[str], keys: SettingKeys) -> dict[str, Any] | None:
    if not isinstance(finding, Mapping):
        drop = (
            " (null drops a finding of an included file; this one is in no included file)"
            if finding is None
            else ""
        )
        problems.append(
            f"{where} = {_shown(finding)}: a finding is a mapping with {', '.join(REQUIRED_KEYS)} "
            f"(and optionally scaled, off_policy_only){drop}."
        )
        return None
    for key in finding:
        if key not in FINDING_KEYS:
            problems.append(
                f"{where}: unknown key '{key}'.{keys.suggest(str(key), FINDING_KEYS)} A finding has "
                f"{', '.join(FINDING_KEYS)}."
            )
    measure = _measure(finding, where, problems, keys)
    dose = "dose" in finding or "arms" in finding
    for key in _required(measure, finding, dose):
        if finding.get(key) is None:
            problems.append(
                f"{where}.{key} is not set: {_MISSING_FIX_OF.get((measure, key), _MISSING_FIX[key])}."
            )
    out: dict[str, Any] = (
        _measure_keys(finding, measure, where, problems) if not dose or measure == WINDOW else {}
    )
    for key in ("claim", "paper", "metric"):
        value = finding.get(key)
        if value is None:
            continue
        if isinstance(value, str) and value.strip():
            out[key] = " ".join(value.split())
        else:
            problems.append(f"{where}.{key} = {_shown(value)} is not a non-empty text: {_MISSING_FIX[key]}.")
    if finding.get("window") is not None:
        out["window"] = _window(finding["window"], f"{where}.window", problems)
    direction = finding.get("direction")
    if direction is not None:
        if direction in DIRECTIONS:
            out["direction"] = direction
        else:
            problems.append(
                f"{where}.direction = {_shown(direction)}: the direction is higher or lower (what the paper "
                "finds for the variant's metric relative to the baseline's); write e.g. direction: higher."
            )
    if dose:
        out.update(check_dose(finding, where, problems, keys))
        out.update(_dose_arms(finding, out.get("dose"), where, problems, keys))
    for arm in () if dose else ARMS:
        if finding.get(arm) is not None and arm not in out:
            out[arm] = check_selector(finding[arm], f"{where}.{arm}", problems, keys)
    out.update(_optional_keys(finding, measure, where, problems))
    return {k: out[k] for k in _CHECKED_KEYS if k in out}


def _dose_arms(
    finding: Mapping[str, Any],
    dose: Mapping[str, Any] | None,
    where: str,
    problems: list[str],
    keys: SettingKeys,
) -> dict[str, Any]:
    """A dose-response finding's ``arms`` (the settings every level shares) checked as a selector:
    ``{"select": selector}``, or ``{}`` with the problems (one when it names ``dose.key``, whose
    values select the levels)."""
    if finding.get("arms") is None:
        return {}
    selector = check_selector(finding["arms"], f"{where}.arms", problems, keys)
    if selector is not None and dose is not None and dose["key"] in selector:
        problems.append(
            f"{where}.arms: {dose['key'].removeprefix('trainer.')} is dose.key, whose values select the levels; "
            "drop it from arms (arms holds the settings every level shares)."
        )
        return {}
    return {} if selector is None else {"select": selector}


def _optional_keys(
    finding: Mapping[str, Any], measure: str | None, where: str, problems: list[str]
) -> dict[str, Any]:
    """``scaled`` ("" when not given) and ``off_policy_only`` (false when not given; true only with
    measure window) checked; problems go to ``problems``."""
    out: dict[str, Any] = {}
    scaled = finding.get("scaled")
    if scaled is not None and not isinstance(scaled, str):
        problems.append(
            f"{where}.scaled = {_shown(scaled)}: give free text (quoted), what was scaled from the "
            "paper's setting and how, or leave it out."
        )
    out["scaled"] = " ".join(scaled.split()) if isinstance(scaled, str) else ""
    off = finding.get("off_policy_only", False)
    if not isinstance(off, bool):
        problems.append(
            f"{where}.off_policy_only = {_shown(off)}: true or false (true: only steps with off_policy == 1 "
            "count)."
        )
    elif off and measure in (TO_TARGET, FROM_START):
        problems.append(
            f"{where}.off_policy_only = true: only measure: window reads off-policy steps alone (measure "
            f"{measure} reads every logged row); drop it."
        )
    else:
        out["off_policy_only"] = off
    return out


def _measure(finding: Mapping[str, Any], where: str, problems: list[str], keys: SettingKeys) -> str | None:
    """The finding's ``measure`` (``window`` when not given); None, with the problem, when it is none
    of :data:`MEASURES`."""
    measure = finding.get("measure", WINDOW)
    if measure in MEASURES:
        return measure
    problems.append(
        f"{where}.measure = {_shown(measure)}: the measure is window (the default: each run's mean over "
        "the window), to_target (the steps or tokens until a run first reaches a target) or from_start (each "
        f"run's end against its own starting policy); write e.g. measure: {TO_TARGET}."
        + keys.suggest(str(measure), MEASURES)
    )
    return None


def _required(measure: str | None, finding: Mapping[str, Any], dose: bool = False) -> tuple[str, ...]:
    """The keys a finding of ``measure`` must give (None, an unknown measure: those all share); a
    dose-response finding (``dose``) gives ``dose`` and ``arms`` in place of the two arms."""
    if dose:
        return (*(k for k in REQUIRED_KEYS if k not in ARMS), *DOSE_REQUIRED)
    if measure in (WINDOW, FROM_START):
        return REQUIRED_KEYS
    common = ("claim", "paper", "metric", "direction", "variant")
    if measure is None:
        return common
    return (*common, "baseline", "target", *(["window"] if finding.get("target") == BASELINE_TARGET else []))


def _measure_keys(
    finding: Mapping[str, Any], measure: str | None, where: str, problems: list[str]
) -> dict[str, Any]:
    """``measure``, ``target``, ``x`` and a from_start finding's ``baseline`` checked, as the
    normalised finding holds them (none for ``window``: its record is as before these keys); the
    keys that measure does not read, and ``baseline: start`` outside from_start, are problems."""
    out: dict[str, Any] = {}
    if measure is None:
        return out
    for key in ("target", "x"):
        if measure != TO_TARGET and key in finding:
            problems.append(
                f"{where}.{key} = {_shown(finding[key])}: {key} is read only with measure: to_target (the steps "
                "or tokens until a run reaches a target); drop it, or add measure: to_target."
            )
    if measure == TO_TARGET:
        out.update(_target_keys(finding, where, problems))
    baseline = finding.get("baseline")
    if measure == FROM_START:
        out["baseline"] = START
        if baseline is not None and baseline != START:
            problems.append(
                f"{where}.baseline = {_shown(baseline)}: with measure: from_start each run is compared with its own "
                "starting policy (eval_start.json), not with other runs; write baseline: start."
            )
        metric = finding.get("metric")
        if isinstance(metric, str) and metric.strip() and not metric.strip().startswith("eval/"):
            problems.append(
                f"{where}.metric = {_shown(metric)}: with measure: from_start the start is the starting policy's "
                "greedy eval before step 1, and eval_start.json holds eval/ metrics only; give one, e.g. "
                "metric: eval/accuracy."
            )
    elif baseline == START:
        problems.append(
            f"{where}.baseline = 'start': the runs' own starting policy is the baseline of measure: from_start "
            "only; add measure: from_start, or give settings that select the baseline's runs, e.g. baseline: "
            "{epsilon_high: 0.2}."
        )
        out["baseline"] = None
    if measure != WINDOW:
        out["measure"] = measure
    return out


def _numeric_text(value: Any) -> bool:
    """Whether ``value`` is text that reads as a number (``"0.6"``, ``"1e-1"``)."""
    try:
        return isinstance(value, str) and math.isfinite(float(value))
    except ValueError:
        return False


def _target_keys(finding: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Any]:
    """A to_target finding's ``target`` (``baseline`` or a float) and ``x`` (``step`` when not
    given); a stated target with a window is a problem (no window is read)."""
    out: dict[str, Any] = {}
    target = finding.get("target")
    number = isinstance(target, int | float) and not isinstance(target, bool) and math.isfinite(target)
    if number or target == BASELINE_TARGET:
        out["target"] = float(target) if number else target
    elif target is not None:
        problems.append(
            f"{where}.target = {_shown(target)}: give baseline (the baseline arm's mean of its runs' means over "
            "window) or a finite number, e.g. target: 0.6"
            + ("; a number in quotes is text: write it bare." if _numeric_text(target) else ".")
        )
    if number and finding.get("window") is not None:
        problems.append(
            f"{where}.window = {_shown(finding['window'])}: with a stated target (target: {target}) no window is "
            "read; drop it, or write target: baseline to make the target the baseline's mean over the window."
        )
    x = finding.get("x", "step")
    if x in X_UNITS:
        out["x"] = x
    else:
        problems.append(
            f"{where}.x = {_shown(x)}: x is step (optimizer steps, the default) or tokens (tokens/generated_total, "
            "the completion tokens generated so far, so a variant that generates more per step pays for it); "
            "write e.g. x: tokens."
        )
    return out


def _window(value: Any, where: str, problems: list[str]) -> list[float] | None:
    numbers = (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    )
    if numbers and 0 <= value[0] < value[1] <= 1:
        return [float(value[0]), float(value[1])]
    text = isinstance(value, list | tuple) and any(isinstance(v, str) for v in value)
    problems.append(
        f"{where} = {_shown(value)}: give [a, b] with 0 <= a < b <= 1, fractions of each run's logged "
        "steps (e.g. [0.5, 1.0]: the second half of each run)"
        + (
            "; an entry is text, not a number: write numbers bare, with a dot (YAML reads 1e-1 as text, "
            "1.0e-1 as a number)."
            if text
            else "."
        )
    )
    return None


def check_selector(value: Any, where: str, problems: list[str], keys: SettingKeys) -> dict[str, Any] | None:
    """A selector (a finding's arm, a progression row of the ``report:`` section), checked and
    normalised: ``{dotted key: value}``, keys written like grid keys, values type-checked and
    coerced as grid values are, :data:`SUBGRID` a sub-grid's name; not ``seed`` (a selector pools
    the runs of every seed). Problems go to ``problems``, each starting with ``where``; ``keys``
    (the grid's key language) checks each key and value.

    Returns:
        The normalised selector, or None when it has a problem.
    """
    if not isinstance(value, Mapping) or not value:
        problems.append(
            f"{where} = {_shown(value)}: give a non-empty mapping of settings that select its runs, "
            "written like grid keys, e.g. {epsilon_high: 0.28, num_iterations: 4}."
        )
        return None
    out: dict[str, Any] = {}
    ok = True
    for raw, v in value.items():
        if raw == SUBGRID:
            if not isinstance(v, str) or not v:
                problems.append(
                    f"{where}.subgrid = {_shown(v)}: give the name of one of the grid's sub-grids."
                )
                ok = False
            else:
                out[SUBGRID] = v
            continue
        key = keys.normalize_key(str(raw))
        if key == "seed" or key == "trainer.seed":
            problems.append(
                f"{where}.{raw}: a selector pools the runs of every seed, so seed cannot select one; drop "
                "it (the comparison is over the seeds)."
            )
            ok = False
            continue
        problem = keys.run_setting_key(key, where) or keys.check_setting(key, v, where)
        if problem is None and isinstance(v, float) and not math.isfinite(v):
            problem = (
                f"{where}: {key} = {v!r}: a setting is a finite number, so no run can have it; give one of "
                "the values the grid's runs have."
            )
        if problem is None and key in out:
            problem = f"{where}: {key} is given twice (bare and dotted names are one key); give it once."
        if problem:
            problems.append(problem)
            ok = False
            continue
        out[key] = keys.coerce_number(key, v)
    return out if ok else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def selects(run: Any, selector: Mapping[str, Any]) -> bool:
    """Whether ``run`` (a :class:`harness.settings.runs.RunSpec`) belongs to the arm of ``selector``: every
    selector key equals the run's resolved setting (compared as canonical JSON, so ``2`` and ``2.0``
    differ exactly where the grid coerces them apart; a key the run leaves unset matches only
    ``null``); the key :data:`SUBGRID` compares the run's sub-grid name."""
    return all(setting_json(run, k) == canonical_json(v) for k, v in selector.items())


def setting_json(run: Any, key: str) -> str:
    """``run``'s setting ``key`` (its sub-grid's name for :data:`SUBGRID`) as canonical JSON, ``null``
    when the run leaves it unset."""
    value = run.subgrid if key == SUBGRID else run.get(key, _UNSET)
    return canonical_json(None) if value is _UNSET else canonical_json(value)


def arm_runs(runs: Sequence[Any], selector: Mapping[str, Any]) -> list[Any]:
    """The runs of ``runs`` that :func:`selects` picks, in order."""
    return [r for r in runs if selects(r, selector)]


def setting_text(selector: Mapping[str, Any]) -> str:
    """A selector as ``key=value`` text (``epsilon_high=0.28, subgrid="clip"``), for messages."""
    return ", ".join(f"{k.removeprefix('trainer.')}={json.dumps(v)}" for k, v in selector.items())


def finding_selectors(finding: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The selector of each arm of a checked finding whose runs it compares: ``baseline`` and
    ``variant``; the variant alone for ``from_start`` (each run against its own start); one level
    per value for a dose-response finding, named by
    :func:`analysis.settings.finding_dose.level_label`."""
    if "dose" in finding:
        return level_selectors(finding)
    if finding.get("measure") == FROM_START:
        return {"variant": finding["variant"]}
    return {arm: finding[arm] for arm in ARMS}


def record(plan: Any) -> dict[str, dict[str, Any]]:
    """What ``grid.json`` keeps of the findings: each finding as checked, plus ``arms``:
    ``{"baseline": [run ids], "variant": [run ids]}`` (the plan's runs each selector picks; for a
    ``from_start`` finding, whose baseline is each run's own start, both are the variant's; for a
    dose-response finding ``{level label: [run ids]}``, one per value in order)."""
    out = {}
    for fid, f in plan.grid.findings.items():
        arms = {
            arm: [r.run_id for r in arm_runs(plan.runs, sel)] for arm, sel in finding_selectors(f).items()
        }
        if f.get("measure") == FROM_START:
            arms = {"baseline": arms["variant"], "variant": arms["variant"]}
        out[fid] = {**f, "arms": arms}
    return out
