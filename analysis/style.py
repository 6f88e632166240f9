"""One figure style for every plot of the package, and the helper that saves figures.

Sizes target a single column of a two-column paper (3.25 in wide) read at 100%: 8 pt text, 7 pt
ticks and legends. PDF and PS embed TrueType fonts (``fonttype 42``) because Type 3 fonts are
rejected by several publishers' checks. Colours come from the Okabe-Ito palette (Okabe & Ito 2008,
"Color Universal Design"), distinguishable under the common colour-vision deficiencies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.load import NONE_LABEL
from harness.trl_boundary import loss_names

__all__ = [
    "COLUMN_WIDTH_IN",
    "FULL_WIDTH_IN",
    "PALETTE",
    "RC",
    "context",
    "figure",
    "points_beyond_y",
    "save",
    "variant_colors",
]

COLUMN_WIDTH_IN = 3.25  # single column of a two-column paper, inches
FULL_WIDTH_IN = 6.75  # full text width of a two-column paper, inches

#: Okabe-Ito colours, then seaborn's "colorblind" brown and Paul Tol's darker hues for more than
#: eight variants; the two light colours (pink, yellow: hard to see as thin lines on white) last.
PALETTE: tuple[str, ...] = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#949494",  # grey
    "#CA9161",  # brown
    "#332288",  # indigo (Paul Tol)
    "#882255",  # wine (Paul Tol)
    "#999933",  # olive (Paul Tol)
    "#117733",  # dark green (Paul Tol)
    "#FBAFE4",  # pink
    "#F0E442",  # yellow
)

#: Grey: the colour of a missing value (a run that leaves the key at TRL's default).
_NONE_SLOT = 7


#: The slots chosen for contrast where the names are known: GRPO (the usual baseline) and VESPO at
#: the two most distinct hues. A choice of style, not a fact of TRL's: a loss it does not name
#: (one TRL adds) takes the next free slot.
_CHOSEN: dict[str, int] = {
    "grpo": 0,
    "dr_grpo": 1,
    "dapo": 2,
    "vespo": 3,
    "gspo": 4,
    "cispo": 5,
    "bnpo": 6,
    "sapo": 9,
    "luspo": 10,
}


def _fixed_slots() -> dict[str, int]:
    """The palette slot of each built-in loss, the same whatever else a figure shows: every name of
    :func:`harness.trl_boundary.loss_names` (TRL's loss types, then the named variants such as
    gspo), at its slot in :data:`_CHOSEN` or else at the next slot no other name holds (the grey of
    a missing value left out), so a loss type TRL adds gets its own colour from the boundary's
    record alone."""
    names = loss_names()
    taken = {_CHOSEN[n] for n in names if n in _CHOSEN} | {_NONE_SLOT}
    free = (i for i in range(len(PALETTE)) if i not in taken)
    return {n: _CHOSEN[n] if n in _CHOSEN else next(free, len(PALETTE)) for n in names}


RC: dict[str, Any] = {
    "font.size": 8,
    "axes.titlesize": 8,
    # a fixed title height: no panel has tick labels on top, and matplotlib would otherwise measure
    # every shared axis to place each title
    "axes.titley": 1.0,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 9,
    "lines.linewidth": 1.2,
    "axes.linewidth": 0.6,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.5,
    "axes.grid": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "savefig.dpi": 200,
    "figure.dpi": 100,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "axes.prop_cycle": mpl.cycler(color=list(PALETTE)),
}


@contextlib.contextmanager
def context() -> Iterator[None]:
    """Apply :data:`RC` for the duration of a ``with`` block (creation and saving of a figure)."""
    with mpl.rc_context(RC):
        yield


def figure(
    ncols: int = 1, nrows: int = 1, *, width: float | None = None, panel_height: float = 2.0
) -> Figure:
    """A pyplot-free figure sized for ``nrows × ncols`` panels.

    Args:
        ncols: panels per row.
        nrows: panel rows.
        width: total width in inches; default one column for one panel, full width otherwise.
        panel_height: height of one panel row in inches.

    Returns:
        A :class:`matplotlib.figure.Figure` with constrained layout and no axes yet. It is not
        registered with pyplot, so it is freed when dropped and never pops up a window.
    """
    if width is None:
        width = COLUMN_WIDTH_IN if ncols == 1 else min(FULL_WIDTH_IN, 2.4 * ncols)
    with context():
        fig = Figure(figsize=(width, panel_height * nrows), layout="constrained")
    FigureCanvasAgg(fig)  # a renderer to measure text with (legend widths), still without pyplot
    return fig


def variant_colors(labels: Iterable[Any]) -> dict[str, str]:
    """A colour for each variant label, the same in every figure.

    Built-in losses (``grpo``, ``dr_grpo``, ``dapo``, ..., ``gspo``) keep fixed palette slots; any other label
    takes the first free slot in sorted order, so a given set of labels always maps the same way.

    Args:
        labels: variant labels (converted with ``str``).

    Returns:
        ``{label: hex colour}``; colours repeat only beyond :data:`PALETTE`'s length.
    """
    names = list(dict.fromkeys(str(x) for x in labels))
    out: dict[str, str] = {}
    used: set[int] = set()
    fixed = _fixed_slots()
    for name in names:
        if name in fixed:
            slot = fixed[name]
            out[name] = PALETTE[slot]
            used.add(slot)
    if NONE_LABEL in names:
        # A missing value (e.g. the trainer's default) is a neutral reference: always grey.
        out[NONE_LABEL] = PALETTE[_NONE_SLOT]
        used.add(_NONE_SLOT)
    free = [i for i in range(len(PALETTE)) if i not in used]
    rest = sorted(n for n in names if n not in out)
    for k, name in enumerate(rest):
        out[name] = PALETTE[free[k]] if k < len(free) else PALETTE[k % len(PALETTE)]
    return out


def save(fig: Figure, stem: str | Path, formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Save ``fig`` as ``<stem>.png`` (200 dpi) and ``<stem>.pdf`` (vector), or ``formats``.

    Figures from :func:`figure` use constrained layout, which already keeps legends placed
    outside the axes inside the figure, so no tight-bbox pass (a second full draw) is needed. The
    style is applied while saving because ``pdf.fonttype`` is read at save time, not at creation.

    Args:
        fig: the figure.
        stem: output path without suffix; parent folders are created.
        formats: file suffixes understood by matplotlib.

    Returns:
        The written paths, in ``formats`` order.
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    with context():
        for fmt in formats:
            path = stem.with_name(f"{stem.name}.{fmt}")
            if fig.get_layout_engine() is None:  # not from figure(): crop to the contents instead
                fig.savefig(path, format=fmt, bbox_inches="tight", pad_inches=0.02)
            else:
                fig.savefig(path, format=fmt)
            paths.append(path)
    return paths


def points_beyond_y(fig: Figure) -> dict[str, int]:
    """How many drawn data points lie outside their panel's y-limits (and so are cut at its edge).

    Counts the vertices of every line and band (``fill_between``) drawn in data coordinates, in
    every panel of ``fig``; lines in axes coordinates (``axvline`` and the like) are not data.
    On a log axis a value <= 0 cannot be drawn at all and is not counted here.

    Args:
        fig: a drawn figure.

    Returns:
        ``{panel title: count}`` of the finite points with x inside the panel's x-limits and y
        outside its y-limits, for the panels that have any, named by their row's y label and their
        (column's) title (``""`` when a panel has neither).
    """
    import numpy as np
    from matplotlib.collections import PolyCollection

    out: dict[str, int] = {}
    for ax in fig.axes:
        lo, hi = sorted(ax.get_ylim())
        xlo, xhi = sorted(ax.get_xlim())
        log = ax.get_yscale() == "log"
        xys = [
            np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
            for line in ax.get_lines()
            if line.get_transform() == ax.transData and np.size(line.get_ydata()) > 0
        ]
        xys += [
            np.unique(p.vertices, axis=0)  # a closed polygon repeats its first vertex
            for coll in ax.collections
            if isinstance(coll, PolyCollection) and coll.get_transform() == ax.transData
            for p in coll.get_paths()
        ]
        for xy in xys:
            x, y = xy[:, 0], xy[:, 1]
            ok = np.isfinite(x) & np.isfinite(y) & (x >= xlo) & (x <= xhi)
            if log:
                ok &= y > 0
            n = int(np.count_nonzero(ok & ((y < lo) | (y > hi))))
            if n:
                title = _panel_name(ax, fig)
                out[title] = out.get(title, 0) + n
    return out


def _panel_name(ax: Any, fig: Figure) -> str:
    """A panel's row label (the y label in its grid row) and title (its own, else its column's)."""

    def clean(text: str) -> str:
        return " ".join(text.split())

    spec = ax.get_subplotspec() if hasattr(ax, "get_subplotspec") else None
    if spec is None:
        return ", ".join(t for t in (clean(ax.get_ylabel()), clean(ax.get_title())) if t)
    row, col = spec.rowspan.start, spec.colspan.start
    ylabel, title = clean(ax.get_ylabel()), clean(ax.get_title())
    for other in fig.axes:
        o = other.get_subplotspec() if hasattr(other, "get_subplotspec") else None
        if o is None or o.get_gridspec() is not spec.get_gridspec():
            continue
        if not ylabel and o.rowspan.start == row:
            ylabel = clean(other.get_ylabel())
        if not title and o.colspan.start == col:
            title = clean(other.get_title())
    return ", ".join(t for t in (ylabel, title) if t)
