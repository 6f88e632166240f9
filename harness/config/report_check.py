"""The grid's ``report:`` section, checked and normalised when the grid is loaded.

Its schema (keys, choices, the smoothing parser) is :class:`harness.config.report_section.ReportSettings`,
shared with the report; here each key's value is checked against the grid: ``hue``/``col``/``row``
and the ``baseline``'s keys name run settings, metric names are names, ``target`` a finite number.
No run setting: no run id depends on it. A progression's rows are checked against the plan's runs
(:func:`progression_problems`) and recorded with their run ids (:func:`report_record`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from analysis.settings.findings import arm_runs, setting_text
from harness import layout
from harness.config import report_section
from harness.config.findings import applied_text, check_selector, no_run_problem
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
            return value.strip() if _pass_at_k_ok(value.strip(), where, problems) else None
        problems.append(f"{where} = {value!r}: give a metric name, e.g. reward or eval/accuracy.")
        return None
    if not isinstance(value, list) or not all(isinstance(m, str) and m.strip() for m in value):
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


def _report_progression(value: Any, where: str, problems: list[str]) -> dict[str, Any] | None:
    """``progression``: its shape (:func:`harness.config.report_section.check_progression`), the
    metric a name, each row's selector as a finding's arm's (:func:`harness.config.findings.check_selector`);
    as JSON data with the selectors normalised, or None (problems)."""
    checked, found = report_section.check_progression(value, where=where)
    problems += found
    metric = value.get("metric", layout.EVAL_ACCURACY) if isinstance(value, Mapping) else None
    ok = checked is not None
    if isinstance(metric, str) and metric.strip():
        ok = _report_names(metric, f"{where}.metric", problems, many=False) is not None and ok
    raw = value.get("rows") if isinstance(value, Mapping) else None
    selects = []
    for k, row in enumerate(raw if isinstance(raw, list | tuple) else ()):
        select = row.get("select") if isinstance(row, Mapping) else None
        if isinstance(select, Mapping) and select:  # an empty or missing one: check_progression says so
            select = check_selector(select, f"{where}.rows[{k}].select", problems)
            ok = ok and select is not None
        selects.append(select)
    if not ok or checked is None:
        return None
    rows = [{"label": r.label, "select": sel} for r, sel in zip(checked.rows, selects, strict=True)]
    return {"metric": checked.metric, "rows": rows}


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
    "progression": lambda v, w, p, g: _report_progression(v, w, p),
}
