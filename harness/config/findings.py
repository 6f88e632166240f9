"""The ``findings:`` section of a grid file: claims of papers that the grid's runs put to the test.

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
``baseline`` and ``variant``: one level of runs per value (:mod:`harness.config.finding_dose`). See
docs/findings.md.

Like ``report:``, the section is no run setting: no run id depends on it. It is checked in two
steps, each listing every problem at once with the file, key, value and fix: its shape when the
grid is loaded (:func:`check_findings`, called by :func:`harness.config.spec.load_grid`), and its arms
against the expanded runs (:func:`plan_problems`: a selector that matches no run, arms that share
a run). :func:`record` is what ``grid.json`` keeps of it (each arm's run ids, so the report and
``grpo-harness findings`` need neither the YAML nor a second matching); the verdicts are computed
in :mod:`analysis.findings`.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from harness.config.finding_dose import DOSE_REQUIRED, check_dose, level_selectors
from harness.config.keys import check_setting, coerce_number, normalize_key, run_setting_key, suggest
from harness.config.yaml_files import finding_origins
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


def check_findings(section: Any, problems: list[str], path: Any = None) -> dict[str, dict[str, Any]]:
    """The ``findings:`` section checked and normalised, as JSON data; problems go to ``problems``.

    Each finding becomes ``{claim, paper, metric, window: [a, b] (floats), direction, baseline,
    variant (selectors: {dotted key: value}, bare GRPOConfig names as ``trainer.<name>``, numbers
    coerced to their field's type as grid values are), scaled (``""`` when left out),
    off_policy_only (bool)}``. A finding with any problem is left out of the result.

    Args:
        section: the file's ``findings:`` value (None: no findings).
        problems: where each problem is added, as a sentence naming the key, the value and the fix.
        path: the grid file, to name the included file a finding with a problem comes from.

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
        checked = _check_finding(finding, where, found)
        if found and path is not None:
            found = [p + origin_text(path, str(fid)) for p in found]
        problems += found
        if checked is not None and not found:
            out[str(fid)] = checked
    return out


def origin_text(path: Any, fid: str) -> str:
    """Where finding ``fid`` of grid file ``path`` is stated, when an included file states it (a
    sentence to add to its problems; "" when only the file itself does)."""
    from pathlib import Path

    files = finding_origins(Path(path)).get(fid) or []
    if not files:
        return ""
    *included, last = files
    if last.resolve() != Path(path).resolve():
        return (
            f" (findings.{fid} comes from the included file {last}: fix it there, or drop it from this grid "
            f"with findings: {{{fid}: null}}.)"
        )
    if included:
        return (
            f" (this file's findings.{fid} replaces the one of the included file {included[-1]} whole, not key "
            "by key: give every key here.)"
        )
    return ""


def _check_finding(finding: Any, where: str, problems: list[str]) -> dict[str, Any] | None:
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
                f"{where}: unknown key '{key}'.{suggest(str(key), FINDING_KEYS)} A finding has "
                f"{', '.join(FINDING_KEYS)}."
            )
    measure = _measure(finding, where, problems)
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
        out.update(check_dose(finding, where, problems))
    for arm in () if dose else ARMS:
        if finding.get(arm) is not None and arm not in out:
            out[arm] = check_selector(finding[arm], f"{where}.{arm}", problems)
    out.update(_optional_keys(finding, measure, where, problems))
    return {k: out[k] for k in _CHECKED_KEYS if k in out}


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


def _measure(finding: Mapping[str, Any], where: str, problems: list[str]) -> str | None:
    """The finding's ``measure`` (``window`` when not given); None, with the problem, when it is none
    of :data:`MEASURES`."""
    measure = finding.get("measure", WINDOW)
    if measure in MEASURES:
        return measure
    problems.append(
        f"{where}.measure = {_shown(measure)}: the measure is window (the default: each run's mean over "
        "the window), to_target (the steps or tokens until a run first reaches a target) or from_start (each "
        f"run's end against its own starting policy); write e.g. measure: {TO_TARGET}."
        + suggest(str(measure), MEASURES)
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


def check_selector(value: Any, where: str, problems: list[str]) -> dict[str, Any] | None:
    """A selector (a finding's arm, a progression row of the ``report:`` section), checked and
    normalised: ``{dotted key: value}``, keys written like grid keys, values type-checked and
    coerced as grid values are, :data:`SUBGRID` a sub-grid's name; not ``seed`` (a selector pools
    the runs of every seed). Problems go to ``problems``, each starting with ``where``.

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
        key = normalize_key(str(raw))
        if key == "seed" or key == "trainer.seed":
            problems.append(
                f"{where}.{raw}: a selector pools the runs of every seed, so seed cannot select one; drop "
                "it (the comparison is over the seeds)."
            )
            ok = False
            continue
        problem = run_setting_key(key, where) or check_setting(key, v, where)
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
        out[key] = coerce_number(key, v)
    return out if ok else None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- against the runs of a plan -------------------------------------------------------------------


def selects(run: Any, selector: Mapping[str, Any]) -> bool:
    """Whether ``run`` (a :class:`harness.settings.runs.RunSpec`) belongs to the arm of ``selector``: every
    selector key equals the run's resolved setting (compared as canonical JSON, so ``2`` and ``2.0``
    differ exactly where the grid coerces them apart; a key the run leaves unset matches only
    ``null``); the key :data:`SUBGRID` compares the run's sub-grid name."""
    return all(_value(run, k) == canonical_json(v) for k, v in selector.items())


def _value(run: Any, key: str) -> str:
    value = run.subgrid if key == SUBGRID else run.get(key, _UNSET)
    return canonical_json(None) if value is _UNSET else canonical_json(value)


def arm_runs(runs: Sequence[Any], selector: Mapping[str, Any]) -> list[Any]:
    """The runs of ``runs`` that :func:`selects` picks, in order."""
    return [r for r in runs if selects(r, selector)]


def setting_text(selector: Mapping[str, Any]) -> str:
    """A selector as ``key=value`` text (``epsilon_high=0.28, subgrid="clip"``), for messages."""
    return ", ".join(f"{k.removeprefix('trainer.')}={json.dumps(v)}" for k, v in selector.items())


def plan_problems(plan: Any) -> list[str]:
    """Problems of the grid's findings against its expanded runs (:class:`harness.config.grid.Plan`):

    - an arm's selector that matches no run, naming the key (or the combination) that no run has
      and the values the grid's runs have for it;
    - baseline and variant arms that share a run (a run cannot be compared with itself).

    A ``from_start`` finding has one arm, its variant (each run is compared with its own start); a
    dose-response finding one per value (its ``arms`` selector with ``dose.key`` = the value), each
    of which must select runs.

    Returns:
        One sentence per problem, each with the fix; empty when every finding's arms hold runs.
    """
    problems = []
    runs = list(plan.runs)
    for fid, finding in plan.grid.findings.items():
        where = f"findings.{fid}"
        if "dose" in finding:
            problems += _dose_problems(plan, runs, fid, finding)
            continue
        arms = {}
        for arm, selector in finding_selectors(finding).items():
            arms[arm] = arm_runs(runs, selector)
            if not arms[arm]:
                problems.append(
                    no_run_problem(f"{where}.{arm}", selector, runs, plan)
                    + applied_text(plan.grid, selector)
                    + origin_text(plan.grid.source, fid)
                )
        shared = {r.run_id for r in arms.get("baseline", ())} & {r.run_id for r in arms["variant"]}
        if shared:
            example = next(r for r in arms["baseline"] if r.run_id in shared)
            keys = list(dict.fromkeys([*finding["baseline"], *finding["variant"]]))
            problems.append(
                f"{where}: baseline ({setting_text(finding['baseline'])}) and variant "
                f"({setting_text(finding['variant'])}) share {len(shared)} run(s), e.g. run {example.run_id} "
                f"({setting_text({k: example.varying.get(k) for k in plan.varying_keys})}), and a run cannot "
                f"be compared with itself; give both arms the keys {', '.join(k.removeprefix('trainer.') for k in keys)} "
                "with a different value of one of them." + origin_text(plan.grid.source, fid)
            )
    return problems


def _dose_problems(plan: Any, runs: Sequence[Any], fid: str, finding: Mapping[str, Any]) -> list[str]:
    """A dose-response finding's problems against the runs: its shared ``arms`` selector that picks
    no run (once), else each value whose level holds no run, naming the key and the value."""
    where, shared = f"findings.{fid}", finding["select"]
    origin = origin_text(plan.grid.source, fid)
    if not arm_runs(runs, shared):
        return [
            no_run_problem(f"{where}.arms", shared, runs, plan) + applied_text(plan.grid, shared) + origin
        ]
    out = []
    for i, selector in enumerate(level_selectors(finding).values()):
        if not arm_runs(runs, selector):
            out.append(
                no_run_problem(f"{where}.dose.values[{i}]", selector, runs, plan)
                + applied_text(plan.grid, selector)
                + origin
            )
    return out


def finding_selectors(finding: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The selector of each arm of a checked finding whose runs it compares: ``baseline`` and
    ``variant``; the variant alone for ``from_start`` (each run against its own start); one level
    per value for a dose-response finding, named by
    :func:`harness.config.finding_dose.level_label`."""
    if "dose" in finding:
        return level_selectors(finding)
    if finding.get("measure") == FROM_START:
        return {"variant": finding["variant"]}
    return {arm: finding[arm] for arm in ARMS}


def applied_text(grid: Any, selector: Mapping[str, Any], noun: str = "arm") -> str:
    """A sentence naming the profile settings and ``-o`` overrides that set a key ``selector``
    selects by ("" when none does): they apply before the selectors (``noun``: arm, row) select
    runs."""
    given = [(k, f"--profile {grid.profile} ({k}={json.dumps(v)})") for k, v in grid.profile_settings]
    given += [(o.split("=", 1)[0].strip(), f"-o {o}") for o in grid.overrides]
    hits = [text for key, text in given if normalize_key(key.removeprefix("grid.")) in selector]
    if not hits:
        return ""
    return (
        f" ({' and '.join(dict.fromkeys(hits))} applies before the {noun}s select runs: "
        f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun} that selects by a key it sets must use the value it "
        "gives, or select by other keys or by subgrid.)"
    )


def no_run_problem(where: str, selector: Mapping[str, Any], runs: Sequence[Any], plan: Any = None) -> str:
    """Why ``selector`` matches no run: the first key whose value no run has (with the values the
    grid has), else the combination (with the values of the runs that match all but the last key)."""

    def values_of(key: str, pool: Sequence[Any]) -> str:
        seen = sorted({_value(r, key) for r in pool})
        return ", ".join("unset" if v == "null" else v for v in seen) or "no runs"

    for key, v in selector.items():
        if key == SUBGRID and not any(r.subgrid == v for r in runs):
            return _no_subgrid_problem(where, v, plan)
        if not any(_value(r, key) == canonical_json(v) for r in runs):
            unset = (
                " (null selects the runs that leave it unset, at its default)"
                if any(_value(r, key) == "null" for r in runs)
                else ""
            )
            return (
                f"{where}: no run of the grid has {key} = {json.dumps(v)}; the grid has {key} = "
                f"{values_of(key, runs)}{unset}. Use one of those values, or add {json.dumps(v)} to the grid's axes."
            )
    keys = list(selector)
    partial = arm_runs(runs, {k: selector[k] for k in keys[:-1]})
    last = keys[-1]
    return (
        f"{where}: no run has all of {setting_text(selector)}; the runs with "
        f"{setting_text({k: selector[k] for k in keys[:-1]})} have {last} = {values_of(last, partial)}. "
        "Pick values that occur together in the grid."
    )


def _no_subgrid_problem(where: str, name: str, plan: Any) -> str:
    """Why no run has sub-grid ``name``: the grid has no such sub-grid (naming those it has), or
    every cell of it duplicates a run of an earlier sub-grid, which keeps the run under its name."""
    names = [sub.name for sub in plan.grid.subgrids] if plan is not None else []
    if not names:
        return (
            f"{where}.subgrid = {json.dumps(name)}: the grid has no sub-grids (no subgrids: section), so no "
            "run comes from one; drop subgrid from the arm and select by settings."
        )
    if name not in names:
        return (
            f"{where}.subgrid = {json.dumps(name)}: the grid has no sub-grid of that name; its sub-grids are "
            f"{', '.join(names)}.{suggest(name, names)}"
        )
    firsts = sorted({kept.subgrid for dropped, kept in plan.duplicates if dropped.subgrid == name})
    if not firsts:
        return (
            f"{where}.subgrid = {json.dumps(name)}: sub-grid {name} makes no run (every cell of it breaks a rule, "
            "listed above); fix its settings."
        )
    return (
        f"{where}.subgrid = {json.dumps(name)}: every cell of sub-grid {name} is also a run of sub-grid "
        f"{', '.join(firsts)}, which keeps the run under its own name (a run is made "
        "once); select those runs by their settings, or give the sub-grid a setting of its own."
    )


#: Per-step columns a run's parquet holds whatever its loss (TRL 1.16's GRPO metrics, the
#: harness's own, the testbed's lengths): the names a finding's ``metric`` is held against at plan
#: time, to catch a typo before a run rather than at report time. A name not among them is no error
#: (a loss plugin's ``<name>/...`` metrics, a newer TRL's), only a close one is warned about.
KNOWN_METRICS = (
    "reward", "reward_std", "loss", "grad_norm", "learning_rate", "entropy", "kl", "num_tokens",
    "frac_reward_zero_std", "step_time", "clip_ratio/low_mean", "clip_ratio/low_min",
    "clip_ratio/high_mean", "clip_ratio/high_max", "clip_ratio/region_mean", "cispo_clip_ratio",
    "vespo/phi_seq_mean", "completions/mean_length", "completions/min_length",
    "completions/max_length", "completions/clipped_ratio", "completions/mean_terminated_length",
    "completions/min_terminated_length", "completions/max_terminated_length",
)  # fmt: skip


def metric_warning(metric: str) -> str | None:
    """A warning for a finding's ``metric`` that is not a known column (:data:`KNOWN_METRICS`, the
    harness's own, ``rewards/<name>/mean|std``, ``eval/pass@k``) but is close to one, naming it;
    else None."""
    from harness import layout
    from harness.layout import WSEQ_COLUMNS
    from harness.models.tasks import LENGTH_CORRECT, LENGTH_INCORRECT
    from harness.settings.schema import REWARD_NAMES

    own = (
        layout.STEP_WALL_S, layout.ELAPSED_S, layout.TOKENS_GENERATED, layout.TOKENS_TRAINED,
        layout.TOKENS_GENERATED_TOTAL, layout.PEAK_MEMORY_MB, layout.EVAL_ACCURACY, layout.OFF_POLICY,
        layout.REUSE_INDEX, layout.POLICY_LAG, LENGTH_CORRECT, LENGTH_INCORRECT, layout.SAMPLED_ACCURACY,
        layout.WSEQ_ESS_FRAC, layout.DS_GROUPS_DRAWN, layout.DS_GROUPS_KEPT, layout.DS_GEN_BATCHES,
        layout.DS_COMPLETIONS_GENERATED, layout.DS_SHORT, layout.DS_GROUPS_TRAINED, layout.DS_REWARD_GENERATED,
    )  # fmt: skip
    rewards = tuple(f"rewards/{r}/{s}" for r in REWARD_NAMES for s in ("mean", "std"))
    known = (*KNOWN_METRICS, *own, *WSEQ_COLUMNS, *rewards)
    if metric in known or layout.pass_at_k(metric) is not None:
        return None
    close = difflib.get_close_matches(metric, known, n=1, cutoff=0.8)
    if not close:
        return None
    return (
        f"metric {metric!r} is no column the runs are known to log; did you mean {close[0]!r}? "
        "(a name no run logs is found only when the report is made, after the runs)"
    )


def plan_lines(plan: Any, width: int = 72) -> list[str]:
    """What ``grpo-harness plan`` prints of the findings: per finding its id, the claim (cut to
    ``width`` characters), what each run's value is (the metric and window, the target, or the run
    against its start) and the direction, and each arm with its run count; warnings of a metric name
    close to a known one, of arms with fewer than 2 runs, and of runs that evaluate no eval/ metric
    the finding needs."""
    findings = plan.grid.findings
    if not findings:
        return []
    lines = [f"findings ({len(findings)}):"]
    for fid, f in findings.items():
        claim = f["claim"] if len(f["claim"]) <= width else f["claim"][: width - 3].rstrip() + "..."
        lines.append(f"  {fid}: {claim}")
        arms = {arm: arm_runs(plan.runs, sel) for arm, sel in finding_selectors(f).items()}
        lines.append(f"    {_measure_text(f)}, {f['direction']} expected; {_counts_text(f, arms)}")
        warning = metric_warning(f["metric"])
        if warning:
            lines.append(f"    warning: {warning}")
        lines += _few_runs_warning(f, arms)
        lines += _eval_warning(f, [r for runs in arms.values() for r in runs])
    return lines


def _counts_text(f: Mapping[str, Any], arms: Mapping[str, Sequence[Any]]) -> str:
    """Each arm's selector and run count, as ``plan`` prints them (a dose-response finding: the
    shared selector, then each value's runs)."""
    if "dose" in f:
        levels = ", ".join(f"{name}: {len(runs)}" for name, runs in arms.items())
        key = f["dose"]["key"].removeprefix("trainer.")
        return f"arms {setting_text(f['select'])}; runs per {key} value: {levels}"
    return "; ".join(f"{arm} {setting_text(f[arm])}: {len(arms[arm])} run(s)" for arm in arms)


def _few_runs_warning(f: Mapping[str, Any], arms: Mapping[str, Sequence[Any]]) -> list[str]:
    """A warning when an arm has fewer than 2 runs (a dose-response finding: fewer than 3 runs in
    all), which then gets no verdict."""
    if "dose" in f and sum(len(r) for r in arms.values()) < 3:
        return [
            "    warning: a slope with fewer than 3 runs gets no verdict (no residual spread to test against); "
            "add seeds (e.g. grid: {seed: [0, 1]})."
        ]
    if "dose" not in f and min(len(r) for r in arms.values()) < 2:
        return [
            "    warning: an arm with fewer than 2 runs gets no verdict (no spread to test against); "
            "add seeds (e.g. grid: {seed: [0, 1, 2]})."
        ]
    return []


def _measure_text(f: Mapping[str, Any]) -> str:
    """What a finding's value per run is, as ``plan`` prints it."""
    measure = f.get("measure", WINDOW)
    if "dose" in f:
        a, b = f["window"]
        d = f["dose"]
        x = d["key"].removeprefix("trainer.")
        return (
            f"slope of {f['metric']} over {100 * a:g}-{100 * b:g}% of each run's steps on "
            + (f"ln {x}" if d["scale"] == "log" else x)
            + (", off-policy steps only" if f["off_policy_only"] else "")
        )
    if measure == TO_TARGET:
        a, b = f.get("window") or (0.0, 1.0)
        level = (
            f"the baseline's mean over {100 * a:g}-{100 * b:g}% of its runs' steps"
            if f["target"] == BASELINE_TARGET
            else f"{f['target']:g}"
        )
        unit = "steps" if f["x"] == "step" else "generated tokens"
        return (
            f"{unit} until {f['metric']} first reaches {level} (a run that never does is censored at its "
            "last step)"
        )
    a, b = f["window"]
    if measure == FROM_START:
        return f"{f['metric']} over {100 * a:g}-{100 * b:g}% of each run's steps minus its own start (eval_start.json)"
    return f"{f['metric']} over {100 * a:g}-{100 * b:g}% of each run's steps" + (
        ", off-policy steps only" if f["off_policy_only"] else ""
    )


def _eval_warning(f: Mapping[str, Any], runs: Sequence[Any]) -> list[str]:
    """A warning when a finding reads an eval/ metric (or a from_start finding's start) and some of
    its runs do not evaluate (``harness.eval_steps: 0``); none otherwise. An arm none of whose runs
    evaluates is an error of the plan (:mod:`harness.config.finding_values`)."""
    needs = f.get("measure") == FROM_START or str(f["metric"]).startswith("eval/")
    off = [r for r in runs if getattr(r.harness, "eval_steps", 1) == 0]
    if not (needs and off):
        return []
    what = "no eval_start.json and no eval/ metric" if f.get("measure") == FROM_START else "no eval/ metric"
    return [
        f"    warning: {len(off)} of the finding's {len(runs)} run(s) set harness.eval_steps = 0, so they write "
        f"{what} and will have no value; set harness.eval_steps > 0 for them."
    ]


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
