"""What a report across several results folders writes besides its figures: the lines that open
``index.md`` (the folders as a table, the differences allowed, the keys matched on), the runs left
out without a counterpart, the ``--out`` folder checked before anything is read, and
:data:`analysis.report.across.SOURCES_FILE`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.report.across import FOLDER, SOURCES_FILE, Comparison
from analysis.report.runs import value_text
from analysis.settings.report_values import ReportError
from harness import layout


def report_lines(comparison: Comparison) -> list[str]:
    """The lines ``index.md`` opens with after the run count: the folders as a table (label, path,
    grid, the facets' values, runs compared and left out), the differences allowed, the keys
    matched on, the seeds."""
    c = comparison
    facets = [f for f in c.facets if f != FOLDER]
    head = ["folder", "results folder", "grid", *facets, "runs compared", "left out (no counterpart)"]
    lines = [
        "",
        f"Across {len(c.grids)} results folders, "
        + (
            f"compared by {', '.join(c.across)} (panels)"
            if c.across
            else "which differ in no setting (seeds aside): their runs are pooled"
        )
        + "; runs are matched by their settings, seeds aside. A run id `FOLDER/ID` is the run "
        f"`ID` of that folder (its files: `<results folder>/{layout.RUNS_DIR}/ID`).",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join("---" for _ in head) + " |",
    ]
    for g in c.grids:
        values = [", ".join(sorted({value_text(s.get(f)) for s in g.settings.values()})) for f in facets]
        left = sum(1 for r in c.unmatched if r.startswith(g.label + "/"))
        cells = [g.label, f"`{g.path}`", g.name, *values, str(len(c.kept[g.label])), str(left)]
        lines.append("| " + " | ".join(cells) + " |")
    more = []
    if c.allowed:
        more.append(
            "Also differ between the folders, allowed with `--allow-different` (not compared, so part of every "
            "difference between the panels): " + "; ".join(d.describe(c.grids) for d in c.allowed) + "."
        )
    if c.partial:
        more.append(
            "Matched on the values the folders share (the other runs are left out, listed below): "
            + "; ".join(d.describe(c.grids) for d in c.partial)
            + "."
        )
    if c.seeds is not None:
        more.append(f"Seeds differ between the folders: {c.seeds.describe(c.grids)}.")
    more.extend(f"Note: {n}." for n in c.notes)
    return [*lines, "", *more] if more else lines


def left_out_lines(comparison: Comparison) -> list[str]:
    """One line per started run without a counterpart, for the report's runs left out."""
    return [f"`{r}`: no counterpart ({why})" for r, why in comparison.unmatched.items()]


def out_folder(out: str | Path | None, folders: Sequence[str | Path]) -> Path:
    """Where a report written with ``--out`` goes, checked before anything is read or written.

    Raises:
        ReportError: ``out`` is None (several folders need it), inside a compared folder or holding
            one, not a folder, or a folder holding files no earlier ``--out`` report wrote (a report
            replaces the ``.md``, ``.csv``, ``.tex``, ``.png`` and ``.pdf`` files of its folder).
    """
    if out is None:
        names = "-".join(Path(f).name for f in folders)
        raise ReportError(
            "several results folders make one report: say where it goes with --out DIR, a new folder "
            f"outside the compared ones (e.g. --out results/compare/{names}); it is never written into "
            "one of them"
        )
    out = Path(out)
    target = out.resolve()
    for f in folders:
        folder = Path(f).resolve()
        if target == folder or folder in target.parents or target in folder.parents:
            raise ReportError(
                f"--out {out}: {'inside' if folder in target.parents or target == folder else 'holds'} the "
                f"results folder {f}; give a folder outside every compared folder"
            )
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out}: not a folder; give a new folder")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if entries and SOURCES_FILE not in entries:
        raise ReportError(
            f"--out {out}: holds other files ({', '.join(entries[:5])}{' ...' if len(entries) > 5 else ''}) that "
            f"a report would replace; give a new or empty folder (one an earlier `report --out` wrote, with its "
            f"{SOURCES_FILE}, is replaced)"
        )
    return out


def write_sources(out: Path, folders: Sequence[str | Path], comparison: Comparison | None) -> None:
    """Record in ``out/sources.json`` what the report there was made from: each folder (path,
    label, grid, runs compared), the keys named and allowed, the runs left out without a
    counterpart.

    Raises:
        ReportError: the file cannot be written.
    """
    if comparison is None:
        record: dict[str, Any] = {"folders": [{"path": str(folders[0])}]}
    else:
        record = {
            "folders": [
                {
                    "path": str(g.path),
                    "label": g.label,
                    "grid": g.name,
                    "runs": list(comparison.kept[g.label]),
                }
                for g in comparison.grids
            ],
            "across": list(comparison.across),
            "facets": list(comparison.facets),
            "allow_different": [d.key for d in comparison.allowed],
            "no_counterpart": dict(comparison.unmatched),
        }
    try:
        layout.atomic_write_json(out / SOURCES_FILE, record)
    except OSError as e:
        raise ReportError(f"cannot write {out / SOURCES_FILE}: {e.strerror or e}") from e
