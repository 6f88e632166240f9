"""What every faceted figure of a report shares: :class:`Facets`, the record of how a figure lays
its rows out (label columns, their order, colours, the baseline, on-policy panels), :class:`Drawn`,
what a plot function drew on its ``ax``; the legend that fits the figure's width, panel selection
and facet order, titles that wrap, "no data" notes, thinning of long lines and the mean-with-band
line of one variant.

Every figure module has plot functions that draw one panel on a given ``ax`` (``plot_*(ax, numbers,
facets, ...)``, as rliable's and openrlbenchmark's do) and a function that lays the panels out as a
figure (``*_figure(numbers, facets, ...)``, returning ``(fig, axes)``, never saving). Used by the
curve figures (:mod:`analysis.curves`), the dynamics panels (:mod:`analysis.dynamics`), the w_seq
figure (:mod:`analysis.wseq`), the final-score figures (:mod:`analysis.finals`) and pass@k
(:mod:`analysis.pass_at_k`). Nothing here computes a number of the data; it only lays out and draws.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D

from analysis import style
from analysis.aggregate import X_LABELS, variant_labels
from harness import layout

__all__ = [
    "MAX_POINTS",
    "ON_POLICY_NOTE",
    "Drawn",
    "Facets",
    "draw_mean_band",
    "draw_panel_lines",
    "facet_values",
    "finish_grid",
    "fit_legend",
    "fit_text",
    "hue_labels_of",
    "line_handles",
    "no_data",
    "note_coinciding",
    "panel_rows",
    "panel_title",
    "thin",
    "wrap_title",
]

#: What the panel of an importance-ratio metric says when its runs are on-policy throughout.
ON_POLICY_NOTE = "on-policy throughout:\nratio ≡ 1, not drawn"


@dataclass(frozen=True)
class Facets:
    """How a figure lays its rows out: which label column is the variant (a colour per label),
    which are the panel columns and rows, their labels in display order, the colours, the legend's
    title, the baseline and the panels whose runs are on-policy throughout. Every figure takes
    one instead of a list of keywords; the report builds one per report.

    Attributes:
        hue: the variants' label column of the frames drawn (None: one group).
        col, row: the panel columns' and rows' label columns (None: not faceted).
        hue_order, col_values, row_values: the labels in display order; None: those in the frame
            drawn, in :func:`analysis.aggregate.variant_labels`' order (or as each figure says).
        colors: ``{variant label: colour}``; a label without one gets
            :func:`analysis.style.variant_colors`' (:meth:`palette`).
        legend_title: the variants' legend title (None: none).
        baseline: the baseline's variant label (None: none).
        on_policy: ``(col label, row label)`` of each panel whose runs are on-policy throughout
            (``(None, None)``: the only panel).
    """

    hue: str | None = None
    col: str | None = None
    row: str | None = None
    hue_order: Sequence[str] | None = None
    col_values: Sequence[Any] | None = None
    row_values: Sequence[Any] | None = None
    colors: Mapping[str, str] = field(default_factory=dict)
    legend_title: str | None = None
    baseline: str | None = None
    on_policy: Sequence[tuple[Any, Any]] = ()

    @property
    def by(self) -> list[str]:
        """The label columns in use: hue, col, row (None left out)."""
        return [b for b in (self.hue, self.col, self.row) if b]

    def columns(self, frame: pd.DataFrame | None) -> list[Any]:
        """The panel columns' labels in display order (:func:`facet_values`; ``[None]`` without)."""
        return facet_values(frame, self.col, self.col_values)

    def rows(self, frame: pd.DataFrame | None) -> list[Any]:
        """The panel rows' labels in display order (:func:`facet_values`; ``[None]`` without)."""
        return facet_values(frame, self.row, self.row_values)

    def panel(self, frame: pd.DataFrame, cv: Any = None, rv: Any = None) -> pd.DataFrame:
        """The rows of ``frame`` in the panel at column label ``cv`` and row label ``rv``
        (:func:`panel_rows`)."""
        return panel_rows(frame, self.col, cv, self.row, rv)

    def palette(self, labels: Sequence[str]) -> dict[str, str]:
        """:attr:`colors`, with :func:`analysis.style.variant_colors`' colour for each of
        ``labels`` that has none."""
        out = dict(self.colors)
        for lab, c in style.variant_colors(labels).items():
            out.setdefault(lab, c)
        return out

    def on_policy_columns(self) -> set[Any]:
        """The panel columns' labels of :attr:`on_policy` (figures faceted by ``col`` alone)."""
        return {cv for cv, _ in self.on_policy}


@dataclass(frozen=True)
class Drawn:
    """What a plot function drew on its ``ax``, for the figure around it.

    Attributes:
        labels: the variant labels drawn (the legend lists these).
        lines: the values of each line drawn (1-D arrays), for a y range the panels share.
        bands: the values of each band or faint line drawn (arrays), for the same.
        kinds: marker kinds drawn (a figure's legend explains those it holds).
    """

    labels: list[str] = field(default_factory=list)
    lines: list[np.ndarray] = field(default_factory=list)
    bands: list[np.ndarray] = field(default_factory=list)
    kinds: frozenset[str] = frozenset()


def fit_legend(
    fig: Figure,
    handles: Sequence[Any],
    title: str | None = None,
    *,
    max_cols: int | None = None,
) -> Legend | None:
    """A figure legend below the panels, with as many columns as fit within the figure's width.

    The legend is laid out once with one column to measure its widest entry, then with
    ``floor(figure width / entry width)`` columns (at most ``max_cols``), and checked again after
    layout; it is never wider than the figure, so long labels wrap into more rows instead of
    widening the image, and a title wider than the figure breaks between words.

    Returns:
        The legend, or None when there are no handles.
    """
    handles = list(handles)
    if not handles:
        return None
    n = len(handles)
    # The legend's width does not depend on where it goes, so it is measured without laying out
    # (or drawing) the figure: one column gives the widest entry.
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width * 0.98
    leg = fig.legend(handles=handles, loc="outside lower center", ncols=1, title=title)
    if title:  # a title of many keys breaks between words rather than run past the figure's edges
        wrapped = fit_text(fig, title, width * 72.0 / fig.dpi, leg.get_title().get_fontproperties())
        if wrapped != title:
            title = wrapped
            leg.remove()
            leg = fig.legend(handles=handles, loc="outside lower center", ncols=1, title=title)
    entry = leg.get_window_extent(renderer).width
    ncols = max(1, min(n, max_cols or n, int(width // max(entry, 1.0))))
    while True:
        leg.remove()
        leg = fig.legend(handles=handles, loc="outside lower center", ncols=ncols, title=title)
        if ncols == 1 or leg.get_window_extent(renderer).width <= width:
            break
        ncols -= 1
    # The figure grows by the legend's height, so the panels keep the height they were given
    # (constrained layout would otherwise shrink them, to nothing under a tall legend).
    w, h = fig.get_size_inches()
    fig.set_size_inches(w, h + leg.get_window_extent(renderer).height / fig.dpi + 0.05)
    return leg


def line_handles(labels: Sequence[str], colors: Mapping[str, str]) -> list[Line2D]:
    """Legend lines for variant labels; a long label is wrapped at ", " onto several lines."""
    return [Line2D([], [], color=colors[lab], label=wrap_title(lab, 40)) for lab in labels]


def panel_title(parts: Sequence[str | None], on_policy: bool) -> str:
    """A panel's title: its facet labels ``parts`` (None left out) joined by ", ", with
    "(on-policy)" added when its runs are on-policy throughout ("on-policy" alone without labels)."""
    text = ", ".join(p for p in parts if p)
    if on_policy:
        text = f"{text} (on-policy)" if text else "on-policy"
    return text


def no_data(ax: Axes, text: str = "no data") -> None:
    """Say in the middle of a panel why it is empty (over any reference line drawn there)."""
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        transform=ax.transAxes,
        color="0.4",
        fontsize=7,
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
        zorder=5,
    )


#: Points drawn per line at most: a panel is a few hundred pixels wide, so more points only cost
#: drawing time (curves are smoothed before they get here).
MAX_POINTS = 500


def thin(part: pd.DataFrame) -> pd.DataFrame:
    """Every k-th row of one curve so that at most :data:`MAX_POINTS` are drawn (last row kept)."""
    n = len(part)
    if n <= MAX_POINTS:
        return part
    k = -(-n // MAX_POINTS)
    idx = np.r_[np.arange(0, n - 1, k), n - 1]
    return part.iloc[idx]


def draw_mean_band(ax: Axes, part: pd.DataFrame, color: str, label: str, band: bool = True) -> None:
    """One curve on ``ax``: ``part`` (rows of :attr:`analysis.aggregate.Curves.mean`: ``x``,
    ``mean``, ``lo``, ``hi``) thinned to :data:`MAX_POINTS`, its mean as a line and, with ``band``,
    ``lo``-``hi`` shaded where both are known."""
    part = thin(part)
    xs = part["x"].to_numpy()
    ax.plot(xs, part["mean"].to_numpy(), color=color, label=label)
    if band:
        lo, hi = part["lo"].to_numpy(), part["hi"].to_numpy()
        ok = ~(np.isnan(lo) | np.isnan(hi))
        if ok.any():
            ax.fill_between(xs, lo, hi, where=ok, color=color, alpha=0.2, linewidth=0, interpolate=False)


def panel_rows(frame: pd.DataFrame, col: str | None, cv: Any, row: str | None, rv: Any) -> pd.DataFrame:
    """The rows of ``frame`` in the panel at column label ``cv`` and row label ``rv`` (a facet left
    None, or a label None, does not select). Labels are compared as text, so a panel selects the
    same rows in every figure whatever the column's dtype (``0.1`` and ``"0.1"`` are one label).

    Returns:
        A view of ``frame``'s rows (same columns).
    """
    sel = np.ones(len(frame), dtype=bool)
    if col is not None and cv is not None:
        sel &= (frame[col].astype(str) == str(cv)).to_numpy()
    if row is not None and rv is not None:
        sel &= (frame[row].astype(str) == str(rv)).to_numpy()
    return frame[sel]


def facet_values(frame: pd.DataFrame | None, col: str | None, given: Sequence[Any] | None) -> list[Any]:
    """The panel labels of facet ``col``: ``[None]`` without a facet; ``given`` when given (``[None]``
    when empty); else the labels in ``frame[col]``, in :func:`analysis.aggregate.variant_labels`' order."""
    if col is None:
        return [None]
    if given is not None:
        return list(given) or [None]
    if frame is not None and col in frame.columns and len(frame):
        return list(variant_labels(frame[col].drop_duplicates()).categories)
    return [None]


def hue_labels_of(frame: pd.DataFrame, hue: str | None, given: Sequence[str] | None) -> list[str]:
    """The variant labels of column ``hue`` in display order: ``given`` when given, else those in
    ``frame`` in :func:`analysis.aggregate.variant_labels`' order; ``[]`` without a hue."""
    if hue is None:
        return []
    if given is not None:
        return list(given)
    if hue in frame.columns and len(frame):
        return [str(c) for c in variant_labels(frame[hue].drop_duplicates()).categories]
    return []


def draw_panel_lines(
    ax: Axes,
    part: pd.DataFrame,
    runs: pd.DataFrame | None,
    hue: str | None,
    hue_labels: Sequence[str],
    colors: Mapping[str, str],
    metric: str,
) -> Drawn:
    """Draw one panel's curves: each run of ``runs`` (``Curves.runs`` rows) faintly, then each
    hue label's mean line and band from ``part`` (``Curves.mean`` rows).

    Returns:
        The hue labels drawn, the mean lines' values and the values drawn as bands or faint runs
        (for the y range), in drawing order.
    """
    drawn = Drawn()
    for _, p in runs.groupby(layout.RUN_ID, sort=False) if runs is not None else ():
        lab = str(p[hue].iloc[0]) if hue else "all"
        p = thin(p)
        ax.plot(p["x"], p["y"], color=colors.get(lab, "0.5"), alpha=0.35, linewidth=0.6)
        drawn.bands.append(p["y"].to_numpy())
    for lab in hue_labels or [None]:
        p = part if lab is None else part[(part[hue] == lab).to_numpy()]
        if len(p) and p["mean"].notna().any():
            draw_mean_band(ax, p, colors[lab] if lab is not None else colors["all"], lab or metric)
            drawn.lines.append(p["mean"].to_numpy())
            drawn.bands.append(p[["lo", "hi"]].to_numpy())
            if lab is not None:
                drawn.labels.append(lab)
    return drawn


def fit_text(fig: Figure, text: str, width_pt: float, font: Any) -> str:
    """``text`` broken between words so that no line is wider than ``width_pt`` points when drawn
    in ``font`` (a :class:`matplotlib.font_manager.FontProperties`), measured with the figure's
    renderer; its own line breaks are kept, and a single word wider than that stays whole."""
    renderer = fig.canvas.get_renderer()
    scale = 72.0 / fig.dpi  # the renderer measures pixels

    def width(s: str) -> float:
        return renderer.get_text_width_height_descent(s, font, ismath=False)[0] * scale

    lines = []
    for part in text.split("\n"):
        line = ""
        for word in part.split(" "):
            candidate = f"{line} {word}" if line else word
            if line and width(candidate) > width_pt:
                lines.append(line)
                line = word
            else:
                line = candidate
        lines.append(line)
    return "\n".join(lines)


def wrap_title(text: str, width: int = 24) -> str:
    """A panel title or label broken at ", " (or, for a longer part, between words) so that it
    fits above a panel of a multi-panel figure or in a legend."""
    if len(text) <= width:
        return text
    if ", " not in text:
        return "\n".join(textwrap.wrap(text, width, break_long_words=True)) or text
    lines, line = [], ""
    for part in text.split(", "):
        candidate = f"{line}, {part}" if line else part
        if len(candidate) > width and line:
            lines.append(line + ",")
            line = part
        else:
            line = candidate
    lines.append(line)
    return "\n".join(lines)


def finish_grid(axes: np.ndarray, used: set[tuple[int, int]], x: str) -> None:
    """Hide the panels of a grid that hold nothing; label x on the lowest used panel of each column."""
    nr, nc = axes.shape
    for i in range(nr):
        for j in range(nc):
            if (i, j) not in used:
                axes[i, j].set_visible(False)
            elif i == nr - 1 or (i + 1, j) not in used:
                axes[i, j].set_xlabel(X_LABELS.get(x, x))
                axes[i, j].xaxis.set_tick_params(labelbottom=True)


def note_coinciding(ax: Axes, part: pd.DataFrame, hue: str | None) -> None:
    """Say so in the panel when every variant's curve is the same (e.g. clip settings on-policy,
    where the clip never fires): otherwise the last line drawn hides the others."""
    if hue is None or part.empty:
        return
    curves_ = [p["mean"].to_numpy() for _, p in part.groupby(hue, observed=True, sort=False) if len(p)]
    if len(curves_) > 1 and all(
        c.shape == curves_[0].shape and np.array_equal(c, curves_[0], equal_nan=True) for c in curves_
    ):
        ax.text(
            0.02,
            0.97,
            f"all {len(curves_)} variants coincide",
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=6.5,
            color="0.35",
        )
