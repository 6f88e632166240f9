"""The grid's ``report:`` section against the grid's own settings and runs, while a grid is planned.

The section's settings, their defaults and the check of each value are analysis's
(:class:`analysis.settings.report.ReportSettings`, a module that loads neither pandas nor
matplotlib); here that check is bound to the grid's keys and the findings' selector language
(:func:`check_report`), a progression's rows are checked against the plan's runs
(:func:`progression_problems`) and recorded with their run ids (:func:`report_record`). No run
setting: no run id depends on the section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analysis.settings.findings import arm_runs, setting_text
from analysis.settings.report import KeyRules, check_section
from harness.config.findings import applied_text, check_selector, no_run_problem
from harness.config.keys import normalize_key, run_setting_key


def check_report(
    section: Any,
    problems: list[str],
    given_at: Mapping[str, str] | None = None,
    grid_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``report:`` section checked and normalised, as JSON data; problems go to ``problems``
    (:func:`analysis.settings.report.check_section`, with the grid's rules: setting keys written
    like grid keys and checked as run settings, a progression row's selector as a finding's arm).

    ``hue``/``col``/``row`` become lists of dotted setting keys; ``smoothing`` one of "auto", "none",
    ``{"window": n}``, ``{"ema": a}``; ``target`` a float; other keys as given. Keys left out or null
    are absent. ``given_at`` names where a key was set when not in the file (``-o report.x``,
    ``profiles.quick.report.hue``); ``grid_keys`` are the grid's varying keys (a baseline may name
    them by their last part, as variant labels do).
    """
    rules = KeyRules(
        planning=True,
        normalize=normalize_key,
        problem=run_setting_key,
        selector=check_selector,
        grid_keys=tuple(grid_keys),
    )
    return check_section(section, problems, given_at=given_at, rules=rules)


def progression_problems(plan: Any) -> list[str]:
    """Problems of the ``report:`` section's progression against the plan's runs
    (:class:`harness.config.grid.Plan`), as the findings' arms are checked
    (:func:`harness.config.findings.plan_problems`): a row that selects no run (naming the key or
    combination no run has and the values the grid has), and two rows that select a run in common.

    Returns:
        One sentence per problem, each with the fix; empty without a progression or when every row
        selects runs of its own.
    """
    section = (plan.grid.report or {}).get("progression")
    if not section:
        return []
    where = "report.progression"
    runs = list(plan.runs)
    picked = [arm_runs(runs, row["select"]) for row in section["rows"]]
    problems = []
    for k, (row, selected) in enumerate(zip(section["rows"], picked, strict=True)):
        if not selected:
            problems.append(
                no_run_problem(f"{where}.rows[{k}] ({row['label']}).select", row["select"], runs, plan)
                + applied_text(plan.grid, row["select"], noun="row")
            )
    for i in range(len(picked)):
        for j in range(i + 1, len(picked)):
            shared = [r for r in picked[i] if r.run_id in {x.run_id for x in picked[j]}]
            if shared:
                a, b = section["rows"][i], section["rows"][j]
                problems.append(
                    f"{where}.rows[{i}] ({a['label']}: {setting_text(a['select'])}) and rows[{j}] ({b['label']}: "
                    f"{setting_text(b['select'])}) select the same {len(shared)} run(s), e.g. run "
                    f"{shared[0].run_id} ({setting_text({k: shared[0].varying.get(k) for k in plan.varying_keys})}); "
                    "a run belongs to one row (each row is one set of techniques, compared with the row above): "
                    "give the rows selectors that no run satisfies together, e.g. a sub-grid each (select: "
                    "{subgrid: NAME})."
                )
    return problems


def progression_lines(plan: Any) -> list[str]:
    """What ``grpo-harness plan`` prints of the ``report:`` section's progression: its metric, and
    each row with its selector and the runs it selects; none without one."""
    section = (plan.grid.report or {}).get("progression")
    if not section:
        return []
    lines = [f"report progression ({len(section['rows'])} rows, final {section['metric']}):"]
    for row in section["rows"]:
        n = len(arm_runs(list(plan.runs), row["select"]))
        lines.append(f"  {row['label']}: {setting_text(row['select'])}: {n} run(s)")
    return lines


def report_record(plan: Any) -> dict[str, Any]:
    """What ``grid.json`` records of the ``report:`` section: the section as checked, a
    progression's rows each with the run ids its selector picks from the plan (``runs``), so the
    report needs neither the YAML nor a second matching."""
    out = dict(plan.grid.report or {})
    section = out.get("progression")
    if section:
        runs = list(plan.runs)
        out["progression"] = {
            **section,
            "rows": [
                {**row, "runs": [r.run_id for r in arm_runs(runs, row["select"])]} for row in section["rows"]
            ],
        }
    return out
