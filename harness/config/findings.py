"""The ``findings:`` section of a grid file held against the grid: the planning half.

The section's vocabulary, its shape and the selector language are the analysis's
(:mod:`analysis.settings.findings`); this module checks them with the grid's key language
(:mod:`harness.config.keys`) when the grid is loaded (:func:`check_findings`, called by
:func:`harness.config.spec.load_grid`, and :func:`check_selector`, which a progression's rows share),
names the included file a finding with a problem comes from (:func:`origin_text`), holds each
finding's arms against the expanded runs (:func:`plan_problems`: a selector that matches no run,
arms that share a run), and says what ``plan`` prints of the findings (:func:`plan_lines`, with a
warning for a metric name close to a column the runs log, :func:`metric_warning`). The arms whose
runs can never give a finding a value are :mod:`harness.config.finding_values`'.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from analysis.settings import findings as section
from analysis.settings.finding_dose import level_selectors
from analysis.settings.findings import (
    BASELINE_TARGET,
    FROM_START,
    SUBGRID,
    TO_TARGET,
    WINDOW,
    arm_runs,
    finding_selectors,
    setting_json,
    setting_text,
)
from harness.config import keys as grid_keys
from harness.config.yaml_files import finding_origins
from harness.settings.schema import canonical_json


def check_findings(section_value: Any, problems: list[str], path: Any = None) -> dict[str, dict[str, Any]]:
    """:func:`analysis.settings.findings.check_findings` with the grid's key language; ``path``, the
    grid file, names the included file a finding with a problem comes from (:func:`origin_text`).

    Returns:
        ``{finding id: checked finding}`` in the file's order; problems go to ``problems``.
    """
    origin = None if path is None else (lambda fid: origin_text(path, fid))
    return section.check_findings(section_value, problems, grid_keys, origin)


def check_selector(value: Any, where: str, problems: list[str]) -> dict[str, Any] | None:
    """:func:`analysis.settings.findings.check_selector` with the grid's key language: a finding's
    arm or a progression's row, normalised, or None with its problems in ``problems``."""
    return section.check_selector(value, where, problems, grid_keys)


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


def applied_text(grid: Any, selector: Mapping[str, Any], noun: str = "arm") -> str:
    """A sentence naming the profile settings and ``-o`` overrides that set a key ``selector``
    selects by ("" when none does): they apply before the selectors (``noun``: arm, row) select
    runs."""
    given = [(k, f"--profile {grid.profile} ({k}={json.dumps(v)})") for k, v in grid.profile_settings]
    given += [(o.split("=", 1)[0].strip(), f"-o {o}") for o in grid.overrides]
    hits = [text for key, text in given if grid_keys.normalize_key(key.removeprefix("grid.")) in selector]
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
        seen = sorted({setting_json(r, key) for r in pool})
        return ", ".join("unset" if v == "null" else v for v in seen) or "no runs"

    for key, v in selector.items():
        if key == SUBGRID and not any(r.subgrid == v for r in runs):
            return _no_subgrid_problem(where, v, plan)
        if not any(setting_json(r, key) == canonical_json(v) for r in runs):
            unset = (
                " (null selects the runs that leave it unset, at its default)"
                if any(setting_json(r, key) == "null" for r in runs)
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
            f"{', '.join(names)}.{grid_keys.suggest(name, names)}"
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
