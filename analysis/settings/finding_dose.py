"""A dose-response finding of the ``findings:`` section: one numeric setting at several values.

::

    findings:
      F1_clip_higher_dose:
        claim: Under off-policy updates, token entropy rises with the upper clip epsilon_high.
        paper: DAPO, arXiv:2503.14476, §3.1 (Clip-Higher) and Fig. 2b
        metric: entropy
        window: [0.5, 1.0]
        direction: higher              # the metric rises with the value (lower: it falls)
        dose:
          key: epsilon_high            # a numeric setting, written like a grid key
          values: [0.2, 0.28, 0.4, 0.8]
          scale: log                   # optional: linear (the default, the slope per unit of the
                                       # value) or log (per unit of its natural log)
        arms: {subgrid: f1_clip_higher}    # the settings every value's runs share

Each value's runs (a *level*) are those whose settings equal every one of ``arms`` and have
``key`` = the value; the verdict rests on the least-squares slope of the runs' window means on
the value (:mod:`analysis.finding_dose`). Checked when the grid is loaded (:func:`check_dose`, with
the grid's key language that planning passes in) and, against the expanded runs, by
:func:`harness.config.findings.plan_problems` (each value must select runs). ``grid.json``
records ``dose`` as checked, ``arms`` as ``select`` and each level's run ids under ``arms``, keyed
by :func:`level_label`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from analysis.settings.keys import SettingKeys

#: The keys of a finding's ``dose`` mapping.
DOSE_KEYS = ("key", "values", "scale")
#: The x of the regression: the value itself, or its natural log.
SCALES = ("linear", "log")
#: What a dose-response finding must give beside claim, paper, metric, window and direction.
DOSE_REQUIRED = ("dose", "arms")
_EXAMPLE = "dose: {key: epsilon_high, values: [0.2, 0.28, 0.4, 0.8]}"


def level_label(value: Any) -> str:
    """A level's name: its value as JSON text (``0.2``, ``1e-05``, ``4``), the key of its run ids
    in ``grid.json``'s ``arms``."""
    return json.dumps(value)


def level_selectors(finding: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{level label: selector}`` of a checked dose-response finding: each value's selector is the
    shared one (``select``) with ``key`` = the value, in the order of ``values``."""
    dose = finding["dose"]
    return {level_label(v): {**finding["select"], dose["key"]: v} for v in dose["values"]}


def check_dose(
    finding: Mapping[str, Any], where: str, problems: list[str], keys: SettingKeys
) -> dict[str, Any]:
    """A finding's ``dose`` checked and normalised: ``{"dose": {key (dotted), values (coerced to the
    field's type, as grid values are), scale}}`` when it passed; each problem goes to ``problems``
    naming the finding, the key, the value and the fix. ``baseline`` and ``variant``, and a measure
    other than window, are problems with a dose (the levels are the arms; the shared ``arms``
    selector is checked with the other selectors, :func:`analysis.settings.findings.check_findings`).
    ``keys``: the grid's key language (:class:`analysis.settings.keys.SettingKeys`), which checks the
    key and the values."""
    out: dict[str, Any] = {}
    for arm in ("baseline", "variant"):
        if finding.get(arm) is not None:
            problems.append(
                f"{where}.{arm}: a dose-response finding (dose:) selects its runs by arms (the settings every "
                f"value's runs share) and dose.values, one level per value; drop {arm}, or drop dose for a "
                "comparison of two arms."
            )
    measure = finding.get("measure", "window")
    if measure != "window":
        problems.append(
            f"{where}.measure = {measure!r}: a dose-response finding regresses each run's window mean on the "
            "value; drop measure (or write measure: window)."
        )
    dose = _dose(finding.get("dose"), f"{where}.dose", problems, keys)
    if dose is not None:
        out["dose"] = dose
    return out


def _dose(value: Any, where: str, problems: list[str], keys: SettingKeys) -> dict[str, Any] | None:
    """``dose`` checked: ``{key, values, scale}``, or None with the problems."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(
            f"{where} = {_shown(value)}: give the setting and its values, e.g. {_EXAMPLE} (scale: linear or "
            "log is optional)."
        )
        return None
    found: list[str] = []
    for k in value:
        if k not in DOSE_KEYS:
            found.append(
                f"{where}: unknown key '{k}'.{keys.suggest(str(k), DOSE_KEYS)} dose has key, values and "
                "optionally scale."
            )
    key = _key(value.get("key"), where, found, keys)
    values = _values(value.get("values"), key, where, found, keys)
    scale = value.get("scale", "linear")
    if scale not in SCALES:
        found.append(
            f"{where}.scale = {_shown(scale)}: the slope is per unit of the value (scale: linear, the default) or "
            "of its natural log (scale: log, for values spread over orders of magnitude); write one of them."
        )
    elif scale == "log" and values and any(v <= 0 for v in values):
        found.append(
            f"{where}.scale = log: the log of {', '.join(_shown(v) for v in values if v <= 0)} is not defined; "
            "give positive values, or scale: linear."
        )
    problems += found
    if found or key is None or values is None:
        return None
    return {"key": key, "values": values, "scale": scale}


def _key(value: Any, where: str, problems: list[str], keys: SettingKeys) -> str | None:
    """``dose.key`` as a dotted setting key, or None with the problem."""
    if value is None:
        problems.append(
            f"{where}.key is not set: name the numeric setting the levels vary, e.g. key: epsilon_high."
        )
        return None
    if not isinstance(value, str) or not value.strip():
        problems.append(
            f"{where}.key = {_shown(value)}: name a numeric setting written like a grid key, e.g. key: "
            "epsilon_high or key: task.kwargs.max_terms."
        )
        return None
    key = keys.normalize_key(value.strip())
    if key in ("seed", "trainer.seed", "subgrid"):
        problems.append(
            f"{where}.key = {value!r}: the levels are values of a run setting ({'the seeds are pooled within each level' if 'seed' in key else 'a sub-grid name is no number'}); "
            "name a numeric setting, e.g. key: epsilon_high."
        )
        return None
    problem = keys.run_setting_key(key, f"{where}.key")
    if problem:
        problems.append(problem)
        return None
    return key


def _values(
    value: Any, key: str | None, where: str, problems: list[str], keys: SettingKeys
) -> list[Any] | None:
    """``dose.values``: at least two distinct finite numbers, each a valid value of ``key``
    (coerced to its field's type); None with the problems."""
    if value is None:
        problems.append(
            f"{where}.values is not set: give the setting's values, e.g. values: [0.2, 0.28, 0.4, 0.8]."
        )
        return None
    if not isinstance(value, list | tuple) or len(value) < 2:
        problems.append(
            f"{where}.values = {_shown(value)}: give a list of at least two numbers, the values whose runs form "
            "the levels, e.g. values: [0.2, 0.28, 0.4, 0.8] (a slope needs two values; three or more show its shape)."
        )
        return None
    out: list[Any] = []
    ok = True
    for i, v in enumerate(value):
        here = f"{where}.values[{i}]"
        problem = _number_problem(v, here)
        if problem is None and key is not None:
            problem = keys.check_setting(key, v, here)
        if problem:
            problems.append(problem)
            ok = False
            continue
        v = keys.coerce_number(key, v) if key is not None else v
        if any(float(v) == float(w) for w in out):
            problems.append(f"{here} = {_shown(v)} is given twice; give each value once.")
            ok = False
            continue
        out.append(v)
    return out if ok else None


def _number_problem(v: Any, where: str) -> str | None:
    """Why ``v`` is no finite number (None when it is one)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        quoted = isinstance(v, str) and _numeric_text(v)
        return f"{where} = {_shown(v)}: a level is a number" + (
            "; a number in quotes is text: write it bare (YAML reads 1e-1 as text, 1.0e-1 as a number)."
            if quoted
            else "."
        )
    if not math.isfinite(v):
        return f"{where} = {v!r}: a setting is a finite number, so no run can have it; give a finite value."
    return None


def _numeric_text(value: str) -> bool:
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
