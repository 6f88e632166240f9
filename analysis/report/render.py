"""Drawing a report: each section's figures (PNG + PDF) and tables, and ``index.md``
(:func:`render_report`, :func:`write_report`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock

import analysis.report.sections as sections_mod
from analysis.report.data import REPORT_SUFFIXES, ReportData
from analysis.report.page import Page, Section
from analysis.settings.report_values import REPORT_LEAD, ReportError


def render_report(data: ReportData, out: Path) -> list[str]:
    """Draw and write everything of ``data`` into ``out``; returns ``index.md``'s lines: the title,
    the opening lines, the runs left out, then each section's (:func:`in_order`) that has numbers."""
    s = data.settings
    lines = [f"# Report: {data.title}", ""]
    lines.extend(data.lines)
    lines.append("")
    if data.left_out:
        lines.extend(["## Runs left out" if not s.include_unfinished else "## Runs that did not finish", ""])
        lines.append(
            "With `--include-unfinished`, tables and figures also count the runs below that have metrics "
            '(each says "included, marked"); the others are left out:'
            if s.include_unfinished
            else "Tables and figures count finished runs only; these are left out "
            "(`--include-unfinished` adds those with metrics, marked):"
        )
        lines.append("")
        lines.extend(f"- {line}" for line in data.left_out)
        lines.append("")
    if data.empty:
        lines.append(
            "No metrics yet: nothing to plot."
            if data.runs.empty
            else "No metrics of finished runs yet: nothing to plot."
        )
        lines.append("")
    page = Page(data, out)
    for section in in_order(sections_mod.SECTIONS, s.lead):
        numbers = data.sections.get(section.name)
        if numbers is not None and (section.without_runs or not data.empty):
            lines.extend(section.render(numbers, page))
    return lines


def in_order(sections: Sequence[Section], lead: str) -> list[Section]:
    """``sections`` in their order, except that among the figures the ``lead`` setting may name
    (:data:`analysis.settings.report_values.REPORT_LEAD`: the curves, the final scores) the one it names
    comes first, in their first place."""
    slots = [k for k, s in enumerate(sections) if s.name in REPORT_LEAD]
    first = sorted((sections[k] for k in slots), key=lambda s: s.name != lead)  # stable: the lead first
    out = list(sections)
    for k, section in zip(slots, first, strict=True):
        out[k] = section
    return out


def write_report(data: ReportData, skipped: Sequence[tuple[str, str]], out: Path) -> None:
    """Write the report's figures, tables and ``index.md`` (listing the ``skipped`` files,
    ``(path, reason)``) into ``out``, replacing a previous report's.

    Raises:
        ReportError: if ``out`` cannot be written.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        # One report at a time per folder: a second one waits, then replaces the first's outputs
        # whole (two interleaved reports would leave figures that index.md does not list).
        with FileLock(str(out / ".report.lock")):
            for old in out.iterdir():  # a previous report's figures and tables must not outlive their data
                if old.is_file() and old.suffix in REPORT_SUFFIXES:
                    old.unlink()
            lines = render_report(data, out)
            if skipped:
                lines.extend(["## Files not loaded", ""])
                lines.extend(f"- `{path}`: {reason}" for path, reason in skipped)
                lines.append("")
            (out / "index.md").write_text("\n".join(lines))
    except OSError as e:
        raise ReportError(
            f"cannot write the report into {out}: {e.strerror or e} ({e.filename or out}); "
            "free space or fix its permissions, then run `grpo-harness report` again"
        ) from e
