"""The sections of a report, in the order ``index.md`` shows them: :data:`SECTIONS`.

Each module here is one section (a figure, a table, or several): it defines its numbers' record,
how they are computed from the counted runs and how they are drawn, and ends with its
:class:`analysis.report.page.Section`, ``SECTION``. :func:`analysis.report.compute.compute_report`
computes every section's numbers (on a thread pool), :func:`analysis.report.render.render_report`
draws them in this order, the figure the settings' ``lead`` names first among the curves and the
final scores. A new figure is a new module here and its name's line in :data:`ORDER`
(docs/reports.md, "Adding a figure").
"""

from __future__ import annotations

import importlib

from analysis.report.page import Section

#: The report's sections, by their module's name here, in the order ``index.md`` shows them.
ORDER: tuple[str, ...] = (
    "findings",
    "progression",
    "curves",
    "final",
    "tasks",
    "pass_at_k",
    "dynamics",
    "wseq",
    "aggregate",
    "tables",
)

#: Each module's ``SECTION``, in :data:`ORDER`.
SECTIONS: tuple[Section, ...] = tuple(importlib.import_module(f"{__name__}.{name}").SECTION for name in ORDER)

__all__ = ["ORDER", "SECTIONS", "Section"]
