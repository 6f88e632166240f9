"""Confirmation on other seeds: ``grpo-harness findings A --confirm B``.

``B`` is a results folder of the same grid as ``A`` run on other seeds (``-o grid.seed=[...]``).
Before a verdict is read, :func:`confirm_findings` checks that the two are the same grid with the
seeds aside, by the runs' settings (each started run's ``config.json``, matched as ``report A B
--across`` matches them, :mod:`analysis.report.across`), never by folder names:

- no setting differs between the folders (seed and the grid's name aside), and every run of each
  has a counterpart of the same settings in the other;
- the folders share no seed (the same settings and seed repeat a run: no confirmation);
- both record the same findings, each with the same definition (metric, window, direction,
  measure and its keys, the selectors) and arms that select the same settings.

Any mismatch is refused (:class:`analysis.settings.report_values.ReportError`) naming it. Then each
folder's findings table (:func:`analysis.report.inputs.findings_results`, each folder's own Holm
family) and both verdicts side by side (:func:`analysis.finding_tables.confirmation_table`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import findings as findings_mod
from analysis.finding_tables import confirmation_table, note_lines
from analysis.report.across import Grid, differences, is_seed, read_grids, run_signature
from analysis.report.inputs import findings_results, grid_findings
from analysis.settings.report_values import ReportError
from analysis.tables import Table

__all__ = ["Confirmation", "confirm_findings"]

#: The fields of a recorded finding whose difference would make the two verdicts answer different
#: questions (the texts, claim, paper and scaled, may differ: the first folder's are shown).
DEFINITION = (
    "metric",
    "window",
    "direction",
    "measure",
    "target",
    "x",
    "off_policy_only",
    "dose",
    "baseline",
    "variant",
    "select",
)


@dataclass(frozen=True)
class Confirmation:
    """Two folders' verdicts on the same findings (:func:`confirm_findings`).

    Attributes:
        labels: the folders' labels (the shortest end of each path the other lacks).
        seeds: each folder's seeds, as text.
        first, second: each folder's findings table (:func:`analysis.findings.findings_table`).
        table: :func:`analysis.finding_tables.confirmation_table` of the two.
        notes: each folder's notes (runs left out, what limits a verdict), prefixed with its label.
    """

    labels: tuple[str, str]
    seeds: tuple[tuple[str, ...], tuple[str, ...]]
    first: Table
    second: Table
    table: pd.DataFrame
    notes: tuple[str, ...]

    def summary(self) -> str:
        """One line: how many findings replicated."""
        col = self.table["replicated"]
        n = int(col.isin(["replicated", "replicated (opposite)"]).sum())
        a, b = (", ".join(s) for s in self.seeds)
        return (
            f"{n} of {len(col)} finding(s) replicated (both verdicts reproduced, or both opposite): "
            f"{self.labels[0]} on seed(s) {a}, {self.labels[1]} on seed(s) {b}."
        )


def confirm_findings(first: str | Path, second: str | Path) -> Confirmation:
    """The findings of ``first`` confirmed on ``second``, the same grid on other seeds.

    Raises:
        FileNotFoundError: a folder has no ``runs/`` folder.
        ReportError: the folders are not the same grid on other seeds (each mismatch named: a
            setting that differs, a run without a counterpart, a seed both have, a finding one
            lacks or defines otherwise, arms that select other settings), or a folder's findings
            cannot be read.
    """
    grids = read_grids([first, second], all_runs=False)
    labels = (grids[0].label, grids[1].label)
    seeds = tuple(_seeds(g) for g in grids)
    found = [grid_findings(g.path) for g in grids]
    settings = _setting_problems(grids)
    problems = settings + _seed_problems(labels, seeds)
    problems += _finding_problems(grids, found, arms=not settings)  # other settings: other arms, said once
    if problems:
        raise ReportError(
            f"--confirm: {labels[1]} is not the grid of {labels[0]} on other seeds, so its verdicts confirm "
            "nothing:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\nRun the same grid file with other seeds only (e.g. -o grid.seed=[4,5,6,7]) into another results "
            "folder, and confirm on that."
        )
    tables = [findings_results(g.path) for g in grids]
    notes = [
        line for g, t in zip(grids, tables, strict=True) for line in note_lines(t, prefix=f"{g.label}: ")
    ]
    return Confirmation(
        labels=labels,
        seeds=(seeds[0], seeds[1]),
        first=tables[0],
        second=tables[1],
        table=confirmation_table(tables[0], tables[1], labels),
        notes=tuple(notes),
    )


def _seeds(grid: Grid) -> tuple[str, ...]:
    """A folder's seeds (its started runs' ``seed``, else ``trainer.seed``), as text, in order."""
    values = set()
    for s in grid.settings.values():
        key = next((k for k in ("seed", "trainer.seed") if k in s), None)
        values.add(json.dumps(s.get(key)) if key else "unset")
    return tuple(sorted(values, key=lambda v: (len(v), v)))


def _setting_problems(grids: Sequence[Grid]) -> list[str]:
    """The settings that differ between the folders (seed and the grid's name aside), and the runs
    of each without a counterpart of the same settings in the other."""
    out = [f"a setting differs: {d.describe(grids)}" for d in differences(grids) if not is_seed(d.key)]
    if out:  # the runs without a counterpart follow from the differences named
        return out
    sigs = [{r: run_signature(s) for r, s in g.settings.items()} for g in grids]
    unmatched = [
        (f"{g.label}/{r}", sig, grids[1 - i], set(sigs[1 - i].values()))
        for i, g in enumerate(grids)
        for r, sig in sigs[i].items()
        if sig not in set(sigs[1 - i].values())
    ]
    for rid, sig, other, theirs in unmatched[:5]:
        values = {pair for s in theirs for pair in s}
        absent = [f"{k}={v}" for k, v in sig if (k, v) not in values]
        why = (
            f"{', '.join(absent)} in no run of {other.label}"
            if absent
            else f"no run of {other.label} has this combination"
        )
        out.append(f"run {rid} has no counterpart of the same settings: {why}")
    if len(unmatched) > 5:
        out.append(f"and {len(unmatched) - 5} more run(s) without a counterpart")
    return out


def _seed_problems(labels: Sequence[str], seeds: Sequence[Sequence[str]]) -> list[str]:
    """The seeds both folders have: their runs repeat each other's."""
    shared = [s for s in seeds[0] if s in set(seeds[1])]
    if not shared:
        return []
    return [
        f"{labels[0]} and {labels[1]} share seed(s) {', '.join(shared)}: a run with the same settings and seed "
        "repeats the other's, so the confirmation must be on other seeds"
    ]


def _finding_problems(
    grids: Sequence[Grid], found: Sequence[Sequence[findings_mod.Finding]], *, arms: bool = True
) -> list[str]:
    """The findings one folder records and the other does not, those defined otherwise (naming the
    field and both values), and (with ``arms``) the arms that select other settings."""
    a, b = ({f.id: f for f in fs} for fs in found)
    la, lb = grids[0].label, grids[1].label
    out = [f"finding {fid} is recorded in {la}'s grid.json, not in {lb}'s" for fid in a if fid not in b]
    out += [f"finding {fid} is recorded in {lb}'s grid.json, not in {la}'s" for fid in b if fid not in a]
    for fid in (f for f in a if f in b):
        fa, fb = a[fid], b[fid]
        for key in DEFINITION:
            va, vb = _definition(fa, key), _definition(fb, key)
            if va != vb:
                out.append(f"finding {fid}: {key} is {va!r} in {la}, {vb!r} in {lb}")
        out += _arm_problems(fid, fa, fb, grids) if arms else []
    return out


def _definition(f: findings_mod.Finding, key: str) -> Any:
    """A finding's field as it is compared (the selectors and the dose as plain mappings)."""
    value = getattr(f, key)
    if isinstance(value, Mapping):
        return {k: list(v) if isinstance(v, list | tuple) else v for k, v in value.items()}
    return value


def _arm_problems(
    fid: str, fa: findings_mod.Finding, fb: findings_mod.Finding, grids: Sequence[Grid]
) -> list[str]:
    """Each arm whose started runs have other settings (seeds aside) in one folder than in the other."""
    out = []
    for arm in dict.fromkeys([*fa.arm_names, *fb.arm_names]):
        sigs = [
            {run_signature(g.settings[r]) for r in f.arms.get(arm, ()) if r in g.settings}
            for f, g in zip((fa, fb), grids, strict=True)
        ]
        if sigs[0] and sigs[1] and sigs[0] != sigs[1]:
            only = sorted(sigs[0] ^ sigs[1])[0]
            where = grids[0].label if only in sigs[0] else grids[1].label
            shown = ", ".join(f"{k}={v}" for k, v in only)
            out.append(
                f"finding {fid}: arm {arm} selects runs of other settings in each folder, e.g. {shown} only in {where}"
            )
    return out
