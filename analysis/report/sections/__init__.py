"""The sections of a report, in the order ``index.md`` shows them: :data:`SECTIONS`.

Each module here is one section (a figure, a table, or several): it defines its numbers' record,
how they are computed from the counted runs and how they are drawn, and ends with its
:class:`analysis.report.page.Section`, ``SECTION``. :func:`analysis.report.compute.compute_report`
computes every section's numbers (on a thread pool), :func:`analysis.report.render.render_report`
draws them in this order, the figure the settings' ``lead`` names first among the curves and the
final scores. A new figure is a new module here, imported below and placed in :data:`MODULES`
(docs/reports.md, "Adding a figure").
"""

from __future__ import annotations

from analysis.report.page import Section
from analysis.report.sections import (
    aggregate,
    curves,
    dynamics,
    final,
    findings,
    pass_at_k,
    progression,
    tables,
    tasks,
    wseq,
)

#: The report's section modules, in the order ``index.md`` shows them.
MODULES = (findings, progression, curves, final, tasks, pass_at_k, dynamics, wseq, aggregate, tables)

#: Each module's ``SECTION``, in :data:`MODULES`' order.
SECTIONS: tuple[Section, ...] = tuple(m.SECTION for m in MODULES)

#: The sections' names (each its module's name), in :data:`MODULES`' order.
ORDER: tuple[str, ...] = tuple(s.name for s in SECTIONS)

__all__ = ["MODULES", "ORDER", "SECTIONS", "Section"]
