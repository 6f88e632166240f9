"""What a section of the report is (:class:`Section`: its name, how it computes its numbers from
the counted runs and how it renders them into ``index.md``), and what rendering hands it
(:class:`Page`: the report's numbers and its folder, with the helpers that write a figure or a
table under a heading)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from analysis import style, tables
from analysis.panels import Facets
from analysis.report.data import Counted, ReportData
from analysis.settings.report import ReportSettings


def _no_columns(settings: ReportSettings) -> Sequence[str]:
    return ()


def _no_notes(numbers: Any) -> Sequence[str]:
    return ()


@dataclass(frozen=True)
class Section:
    """One section of the report: a figure, a table, or several (:data:`analysis.report.sections.SECTIONS`
    lists them in the order ``index.md`` shows them).

    Attributes:
        name: its key in :attr:`analysis.report.data.ReportData.sections`.
        compute: ``(counted runs) -> numbers``: everything it shows, computed from
            :class:`analysis.report.data.Counted` (no drawing; a frozen record, or None when it has
            nothing to show). Sections are computed at once on a thread pool, so it reads
            ``counted`` and changes nothing of it; what several sections share is made once
            through :meth:`analysis.report.data.Counted.shared`.
        render: ``(numbers, page) -> lines``: draws and writes its files into ``page.out``
            (:meth:`Page.figure`, :meth:`Page.table`) and returns its lines of ``index.md``;
            called only when its numbers are not None.
        without_runs: computed and shown also when no run is counted (the findings: each says
            what it lacks).
        columns: ``(settings) -> names``: metric or setting columns the report must read for it
            beyond the ones every report reads (:func:`analysis.report.inputs.report_columns`).
        notes: ``(numbers) -> lines``: notes for the report's opening lines (what it could not
            show, and why).
    """

    name: str
    compute: Callable[[Counted], Any]
    render: Callable[[Any, Page], list[str]]
    without_runs: bool = False
    columns: Callable[[ReportSettings], Sequence[str]] = _no_columns
    notes: Callable[[Any], Sequence[str]] = _no_notes


@dataclass(frozen=True)
class Page:
    """What a section renders into: the report's numbers and its folder.

    Attributes:
        data: every number of the report (another section's numbers: :meth:`ReportData.numbers`).
        out: the report folder its files go to.
    """

    data: ReportData
    out: Path

    @property
    def settings(self) -> ReportSettings:
        """The layout used."""
        return self.data.settings

    @property
    def facets(self) -> Facets:
        """The figures' layout."""
        return self.data.facets

    def figure(self, fig: Figure, stem: str, *, alt: str, title: str, caption: str) -> list[str]:
        """Save ``fig`` as ``out/stem.png`` and ``.pdf`` and return its section: the heading
        ``title``, the ``caption`` (with how many points the y-limits cut, if any) and the image
        (``alt`` its text)."""
        cut = style.points_beyond_y(fig)
        if cut:
            where = (
                f" ({'; '.join(f'{t}: {n}' for t, n in cut.items())})"
                if len(cut) > 1 or "" not in cut
                else ""
            )
            caption += (
                f" The y-range holds the bulk of the values drawn (1st-99th percentile): {sum(cut.values())} "
                f"point(s) of the lines or bands lie beyond it{where} and are cut at its edge."
            )
        path = self.out / stem
        style.save(fig, path)
        return [*heading(title, caption), f"![{alt}]({path.name}.png)", ""]

    def table(self, table: tables.Table, stem: str, **write: Any) -> str:
        """Write ``table`` as ``out/stem.md``, ``.csv`` and ``.tex`` (:func:`analysis.tables.write_table`
        and its keywords) and return its markdown for ``index.md``."""
        tables.write_table(table, self.out / stem, **write)
        return tables.to_markdown(table)


def heading(title: str, text: str) -> list[str]:
    """A section's first lines of ``index.md``: ``## title`` and the text under it."""
    return [f"## {title}", "", text, ""]


def safe_name(name: str) -> str:
    """``name`` as a file name's part: every character but letters, digits, ``-`` and ``_`` as ``_``."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
