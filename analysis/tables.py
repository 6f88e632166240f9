"""A table of the report as a record, and its one renderer: markdown, CSV and LaTeX.

:class:`Table` holds a frame beside its caption and column headers (the frame stays a plain
frame: no metadata rides in ``DataFrame.attrs``). The tables themselves are made elsewhere, one
module per family: timing (:mod:`analysis.timing`), final performance and resolvable differences
(:mod:`analysis.scores`), the learning check (:mod:`analysis.learning_check`), time to a target
(:mod:`analysis.time_to_target`) and the findings (:mod:`analysis.findings`).

:func:`to_markdown`, :func:`to_latex` and :func:`write_table` render a table (or a plain frame);
``(x, x_lo, x_hi)`` column triples are shown as ``x [lo, hi]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
import pandas as pd

__all__ = ["Table", "as_table", "fmt", "to_latex", "to_markdown", "write_table"]

T = TypeVar("T", bound="Table")


@dataclass(frozen=True)
class Table:
    """A table as the report shows it: the numbers, the caption above them and the headers.

    Attributes:
        frame: the numbers, one row per variant (or per run); the CSV holds it as it is.
        caption: what the table shows and how its numbers were made, written above it in markdown
            and LaTeX ("" for none).
        display: ``{column: header}`` for markdown and LaTeX; a column it does not name is shown
            under its own name. Read-only.
    """

    frame: pd.DataFrame
    caption: str = ""
    display: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "display", MappingProxyType(dict(self.display)))

    def with_headers(self: T, names: Mapping[str, str]) -> T:
        """This table with ``names`` added to its headers (``names`` wins where both name a
        column); the frame and every other field are shared."""
        return replace(self, display={**self.display, **names})

    def with_frame(self: T, frame: pd.DataFrame) -> T:
        """This table with another frame (e.g. a column added), its caption and headers kept."""
        return replace(self, frame=frame)


def as_table(table: Table | pd.DataFrame) -> Table:
    """``table`` as a :class:`Table`: a plain frame becomes one without caption or headers."""
    return table if isinstance(table, Table) else Table(table)


def fmt(v: Any) -> str:
    """A cell as text: 3 significant digits (thousands as ``1,234``), "–" for None or NaN, ``inf``,
    whole numbers and booleans as they are, anything else as ``str``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        if abs(f) >= 1000:
            return f"{f:,.0f}"
        return f"{f:.3g}"
    return str(v)


def _display_frame(shown: Table) -> tuple[pd.DataFrame, list[bool]]:
    """Strings for md/tex (``x [lo, hi]`` for interval triples, headers from :attr:`Table.display`)
    and, per shown column, whether it is numeric (right-aligned)."""
    names, table = shown.display, shown.frame
    out: dict[str, list[str]] = {}
    numeric: list[bool] = []
    skip = set()
    for c in table.columns:
        if c in skip:
            continue
        lo, hi = f"{c}_lo", f"{c}_hi"
        if lo in table.columns and hi in table.columns:
            skip.update((lo, hi))
            out[names.get(c, c)] = [
                fmt(v) if math.isnan(float(a)) else f"{fmt(v)} [{fmt(a)}, {fmt(b)}]"
                for v, a, b in zip(table[c], table[lo], table[hi], strict=True)
            ]
        else:
            out[names.get(c, c)] = [fmt(v) for v in table[c]]
        numeric.append(pd.api.types.is_numeric_dtype(table[c]) and not pd.api.types.is_bool_dtype(table[c]))
    return pd.DataFrame(out, columns=list(out)), numeric


def to_markdown(table: Table | pd.DataFrame) -> str:
    """GitHub-flavoured (pipe) markdown table, one row per row of the frame, no index.

    Numbers with 3 significant digits, NaN as "–", ``x [lo, hi]`` for interval triples, headers
    from :attr:`Table.display` (a plain frame keeps its column names); numeric columns
    right-aligned, others left-aligned; "|" in a cell escaped as "\\|". Columns are padded to a
    common width. The caption is not written (:func:`write_table` writes it).

    Returns:
        The table ending in a newline ("\\n" alone for a frame without columns).
    """
    shown, numeric = _display_frame(as_table(table))
    if not len(shown.columns):
        return "\n"
    cells = shown.map(lambda v: v.replace("|", "\\|"))
    # tabulate aligns columns by their rows: a table without rows gets one blank row, dropped after
    text = (cells if len(cells) else pd.DataFrame([[""] * len(numeric)], columns=cells.columns)).to_markdown(
        index=False,
        tablefmt="pipe",
        disable_numparse=True,
        colalign=["right" if num else "left" for num in numeric],
    )
    return (text if len(cells) else text.rsplit("\n", 1)[0]) + "\n"


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}


def _tex(s: Any) -> str:
    """``s`` as LaTeX text: special characters escaped, "–" as "--"."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(s))


def to_latex(table: Table | pd.DataFrame, *, caption: str | None = None, label: str | None = None) -> str:
    """A ``table`` environment with a booktabs ``tabular`` (needs ``\\usepackage{booktabs}``).

    The cells and headers of :func:`to_markdown`, LaTeX special characters escaped and "–" as
    "--"; numeric columns ``r``, others ``l``.

    Args:
        table: a table of one of the ``*_table`` functions, or any frame.
        caption: caption text (escaped); default :attr:`Table.caption` (none when it is "").
        label: ``\\label`` key, unescaped.

    Returns:
        LaTeX source ending in a newline.
    """
    table = as_table(table)
    shown, numeric = _display_frame(table)
    shown = shown.map(_tex)
    shown.columns = [_tex(c) for c in shown.columns]
    caption = caption if caption is not None else table.caption
    styler = shown.style.hide(axis="index")
    styler.set_table_styles([{"selector": "small", "props": ":;"}], overwrite=False)
    return styler.to_latex(
        column_format="".join("r" if num else "l" for num in numeric),
        position="t",
        position_float="centering",
        hrules=True,
        caption=_tex(caption) if caption else None,
        label=label or None,
    )


def write_table(
    table: Table | pd.DataFrame,
    stem: str | Path,
    *,
    caption: str | None = None,
    extra_md: Mapping[str, Table | pd.DataFrame] | None = None,
    notes: Sequence[str] = (),
    raw: pd.DataFrame | None = None,
) -> list[Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` (raw numbers) and ``<stem>.tex`` (booktabs).

    Args:
        table: the table to write (a plain frame: no caption, its column names as headers).
        stem: output path without suffix; parent folders are created.
        caption: caption for md and tex; default :attr:`Table.caption` (none when it is "").
        extra_md: further ``{heading: frame}`` sections appended to the markdown file only.
        notes: lines written under the table in the markdown file.
        raw: the frame the CSV holds instead of ``table`` (when ``table`` is text made for
            reading, e.g. :func:`analysis.findings.display_table`).

    Returns:
        The three paths written (md, csv, tex).
    """
    table = as_table(table)
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    caption = caption if caption is not None else table.caption
    md = (f"{caption}\n\n" if caption else "") + to_markdown(table)
    if notes:
        md += "\n" + "\n\n".join(notes) + "\n"
    for heading, frame in (extra_md or {}).items():
        md += f"\n**{heading}**\n\n" + to_markdown(frame)
    paths = [
        stem.with_name(stem.name + ".md"),
        stem.with_name(stem.name + ".csv"),
        stem.with_name(stem.name + ".tex"),
    ]
    paths[0].write_text(md)
    (table.frame if raw is None else raw).to_csv(paths[1], index=False)
    paths[2].write_text(to_latex(table, caption=caption, label=f"tab:{stem.name}"))
    return paths
