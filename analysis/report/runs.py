"""One row per run, its variant and panel labels, and the runs the report leaves out (with why)."""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import labels, states, style
from analysis.aggregate import x_values
from analysis.load import NONE_LABEL, LoadInfo, seed_column
from analysis.panels import Facets
from analysis.report.data import PANEL, PANEL_ROW, VARIANT, LabelKeys, Labelled, ReportInputs
from analysis.settings.report import ReportSettings
from analysis.settings.report_values import ReportError
from harness import layout


def resolve_column(df: pd.DataFrame, name: str | None, info: LoadInfo | None = None) -> str | None:
    """A column for a grid key named as given, by alias, or by its last dotted component (``info``:
    the grid axes and aliases the message names)."""
    if name is None:
        return None
    if name in df.columns:
        return name
    if f"trainer.{name}" in df.columns:
        return f"trainer.{name}"
    ends = [c for c in df.columns if isinstance(c, str) and c.endswith("." + name)]
    if len(ends) == 1:
        return ends[0]
    info = info or LoadInfo()
    raise ReportError(
        f"no column {name!r} in the results; grid axes: {sorted(info.varying)}, aliases: {sorted(info.aliases)}"
    )


def _key_column(df: pd.DataFrame, key: str, strict: bool, info: LoadInfo) -> str:
    """The frame column holding config key ``key``; a key no run sets is ``key`` itself, a column
    the frame lacks (:attr:`Labelled.missing`: every run has it missing), unless ``strict`` (a key
    typed on the command line must exist)."""
    try:
        return resolve_column(df, key, info)
    except ReportError:
        if strict:
            raise
        return key


def dotted_key(info: LoadInfo, column: str) -> str:
    """The dotted key of a column named by its alias (``loss_type`` → ``trainer.loss_type``)."""
    return info.aliases.get(column, column)


def _differing_keys(runs: pd.DataFrame, config_columns: Sequence[str], exclude: set[str]) -> list[str]:
    """Config columns whose value differs between runs (seed-like, harness bookkeeping and
    excluded keys left out)."""
    out = []
    for c in config_columns:
        if c in exclude or c in ("grid", "seed") or c.endswith(".seed") or c.startswith("harness."):
            continue
        if c not in runs.columns:
            continue
        if runs[c].astype(object).map(lambda v: repr(None if labels.is_missing(v) else v)).nunique() > 1:
            out.append(c)
    return out


def finished_run_ids(runs: pd.DataFrame) -> list[str]:
    """The run ids of ``runs`` (:func:`run_table`) that finished: a DONE marker that what is on
    disk agrees with."""
    return [str(r) for r in runs.index[(runs["state"] == states.DONE) & (runs["problem"] == "")]]


def findings_runs(
    runs: pd.DataFrame, without: Mapping[str, str], df: pd.DataFrame | None = None
) -> tuple[list[str], dict[str, str]]:
    """The runs a finding may count, and why each other run may not.

    A finding reads its own metric, so a run counts when it finished (:func:`finished_run_ids`)
    whether or not it logged the report's score metric.

    Args:
        runs: :func:`run_table` (the runs with metrics).
        without: the requested runs without metrics, with why (:func:`runs_without_metrics`).
        df: the metrics, to find where a diverged run went non-finite (:func:`analysis.states.divergence_point`)
            when ``runs`` does not say yet; None: as ``runs`` says.

    Returns:
        ``(finished run ids, {run id: why it is not counted})``.
    """
    problems = pd.Series(_done_problems(runs, None), index=runs.index, dtype=object)
    done = (runs["state"] == states.DONE) & (problems == "")
    why = dict(without)
    for rid, r in runs[~done].iterrows():
        if r["state"] == states.DONE:
            why[str(rid)] = f"done, but {problems[rid]}"
        else:
            step = _as_int(r["marker_step"]) if r["state"] == states.DIVERGED else None
            metric = r["diverged_metric"] if isinstance(r["diverged_metric"], str) else None
            if r["state"] == states.DIVERGED and df is not None:
                step, metric = states.divergence_point(df, rid, step, metric)
            if step is None and not pd.isna(r["last_step"]):
                step = int(r["last_step"])
            why[str(rid)] = states.describe(r["state"], step=step, max_steps=r["max_steps"], metric=metric)
    return [str(r) for r in runs.index[done]], why


def runs_without_metrics(
    df: pd.DataFrame, run_states: pd.DataFrame, info: LoadInfo, requested: Sequence[str] = ()
) -> tuple[pd.DataFrame, dict[str, int], dict[str, str]]:
    """A shallow working copy of ``df`` (categorical run ids); per run id, how many of its metrics
    files could not be read (``info.skipped``); and each requested run (default: those of
    ``run_states``) that has no metric rows, with why (``{run_id: phrase}``, in the requested order)."""
    requested = list(requested) or list(run_states.index)
    missing_runs = list(info.missing_runs)
    damaged = dict(info.damaged_runs)
    unreadable: dict[str, int] = {}  # run id -> metrics files that could not be read
    for path, _ in info.skipped:
        parts = Path(path).parts
        if layout.METRICS_DIR in parts:
            rid = parts[parts.index(layout.METRICS_DIR) - 1]
            unreadable[rid] = unreadable.get(rid, 0) + 1
    df = df.copy(deep=False)
    rid_col = df[layout.RUN_ID]
    if not isinstance(rid_col.dtype, pd.CategoricalDtype):
        df[layout.RUN_ID] = rid_col = rid_col.astype("category")
    counts = np.bincount(rid_col.cat.codes.to_numpy(), minlength=len(rid_col.cat.categories))
    with_metrics = {str(c) for c, n in zip(rid_col.cat.categories, counts, strict=True) if n}
    without: dict[str, str] = {}
    for rid in requested:
        if rid in damaged:
            without[rid] = f"damaged run file, left out ({damaged[rid]})"
        elif rid in missing_runs:
            without[rid] = "no run folder yet (not started)"
        elif rid not in with_metrics:
            state = run_states.loc[rid, "state"] if rid in run_states.index else states.PENDING
            without[rid] = {
                states.FAILED: "failed before its first step",
                states.DONE: "done, but none of its metrics could be read (see Files not loaded)",
            }.get(state, "no metrics logged yet")
    return df, unreadable, without


def place_runs_without_metrics(
    inputs: ReportInputs, runs: pd.DataFrame, keys: LabelKeys, without: dict[str, str], labelled: Labelled
) -> tuple[pd.DataFrame, list[str]]:
    """Each run without metrics, under its variant (and panel) when its values in ``grid.json``
    match a labelled run's on every key the labels and panels use.

    Returns:
        ``(placed, left_out)``: one row per placed run (index ``run_id``, the label columns of
        ``runs``), and one line per run without metrics for the report's runs left out.
    """
    grid_runs = inputs.grid_runs
    cols = [c for c in (VARIANT, PANEL, PANEL_ROW) if c in runs.columns]
    key_cols = [*keys.label, *keys.col, *keys.row]
    known = {}  # normalised key values -> the run labels they give
    if cols and len(runs):
        for _, r in runs.drop_duplicates(cols).iterrows():
            known.setdefault(tuple(value_text(r[k]) for k in key_cols), r[cols])
    placed = {}
    left_out = []
    for rid, what in without.items():
        values = grid_runs.get(rid)
        where = None
        if isinstance(values, Mapping) and known:
            probe = [values.get(dotted_key(inputs.load, k), values.get(k, _UNKNOWN)) for k in key_cols]
            for key, lab in known.items():
                if all(v is _UNKNOWN or value_text(v) == kv for v, kv in zip(probe, key, strict=True)):
                    where = lab
                    break
        if where is not None:
            placed[rid] = where
            left_out.append(f"`{rid}` ({_where(where, labelled)}): {what}")
        else:
            left_out.append(f"`{rid}`: {what}")
    frame = (
        pd.DataFrame.from_dict(placed, orient="index", columns=cols) if placed else pd.DataFrame(columns=cols)
    )
    return frame, left_out


_UNKNOWN = object()


def value_text(v: Any) -> str:
    """A config value as text that compares equal across JSON and frame types (2 and 2.0; None and NaN)."""
    if labels.is_missing(v):
        return NONE_LABEL
    if (
        isinstance(v, (int, float, np.integer, np.floating))
        and not isinstance(v, bool)
        and float(v).is_integer()
    ):
        return str(int(v))
    return str(v)


def check_axes(df: pd.DataFrame, s: ReportSettings) -> None:
    """Raise :class:`ReportError` when the x axis or the score metric is not in the results."""
    try:
        x_values(df, s.x)
    except KeyError as e:
        raise ReportError(f"--x {s.x}: {e.args[0]}") from e
    if s.metric not in df.columns or not np.isfinite(df[s.metric].to_numpy(dtype=np.float64)).any():
        known = sorted(
            c for c in df.columns if c.startswith(("reward", "eval/", "rewards/")) and df[c].notna().any()
        )
        raise ReportError(
            f"--metric {s.metric}: no run logged it (report.metric in the grid file, or --metric); "
            f"logged metrics include {', '.join(known) or 'none'}"
        )


def run_table(
    df: pd.DataFrame, run_states: pd.DataFrame, s: ReportSettings
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One row per run with metrics: its config values, state, progress, learning-signal flags,
    and whether the report counts it (``included``). Returns ``(runs, first rows, signal flags)``."""
    rid_col = df[layout.RUN_ID]
    row_codes = rid_col.cat.codes.to_numpy()
    run_names = [str(c) for c in rid_col.cat.categories]
    first_row = np.full(len(run_names), -1, dtype=np.int64)
    first_row[row_codes[::-1]] = np.arange(len(df) - 1, -1, -1)
    present = np.flatnonzero(first_row >= 0)
    first = df.iloc[first_row[present]].copy()
    first.index = pd.Index([run_names[k] for k in present], name=layout.RUN_ID, dtype=object)
    first = first.drop(columns=[layout.RUN_ID])
    runs = first.copy()
    last = np.full(len(run_names), -1, dtype=np.int64)
    np.maximum.at(last, row_codes, df[layout.STEP].to_numpy())
    runs["last_step"] = last[present]
    st = run_states.reindex(runs.index)
    runs["state"] = st["state"].fillna(states.STOPPED)
    runs["marker_step"] = st["marker_step"]
    runs["diverged_metric"] = st["diverged_metric"]
    runs["missing_steps"] = st["missing_steps"].fillna(0).astype(int)
    runs["conflict"] = st["conflict"].fillna("")
    ms = "trainer.max_steps" if "trainer.max_steps" in runs.columns else None
    runs["max_steps"] = [_as_int(v) for v in runs[ms]] if ms else None
    flags = states.signal_flags(df)
    flags.index = flags.index.astype(object)
    runs["no_signal"] = flags["no_signal"].reindex(runs.index).fillna(False).astype(bool)
    runs["zero_variance"] = flags["zero_variance"].reindex(runs.index).fillna(False).astype(bool)
    score = df[s.metric].to_numpy(dtype=np.float64)
    scored = np.bincount(row_codes[np.isfinite(score)], minlength=len(run_names)) > 0
    runs["scored"] = scored[present]
    # A DONE marker is only a result when what is on disk agrees with it.
    runs["problem"] = _done_problems(runs, s.metric)
    done = (runs["state"] == states.DONE) & (runs["problem"] == "")
    runs["included"] = done | (s.include_unfinished & (runs["state"] != states.DONE))
    return runs, first, flags


def label_variants(
    df: pd.DataFrame,
    info: LoadInfo,
    runs: pd.DataFrame,
    first: pd.DataFrame,
    s: ReportSettings,
    strict_keys: Collection[str],
) -> Labelled:
    """Each run's variant (hue), panel (col) and panel row (row) label, the label columns' names,
    the legend title, the keys no run sets, and notes on what the layout could not do as asked.
    Neither ``df`` nor ``runs`` is changed: the labelled runs are a copy (:class:`Labelled`)."""
    runs = runs.copy()
    notes: list[str] = []
    col_keys = [_key_column(df, k, k in strict_keys, info) for k in s.col]
    row_keys = [_key_column(df, k, k in strict_keys, info) for k in s.row]
    for k in (*col_keys, *row_keys):
        if k not in runs.columns:
            runs[k] = first[k] if k in first.columns else np.nan
    faceted = {dotted_key(info, k) for k in (*col_keys, *row_keys)} | set(col_keys) | set(row_keys)
    config_cols = [c for c in info.config_columns if c in runs.columns]
    # Labels come from every run with metrics, so a variant keeps its name whichever runs finished.
    differing = _differing_keys(runs, config_cols, faceted)
    if col_keys or row_keys:
        differing = _split_within_panels(runs, differing, [*col_keys, *row_keys])
    hue_columns, explicit = _hue_columns(df, info, runs, s, strict_keys, differing)
    for k in hue_columns if s.hue is not None else ():
        if k not in runs.columns:
            runs[k] = first[k] if k in first.columns else np.nan
    hue_keys = [dotted_key(info, k) if dotted_key(info, k) in runs.columns else k for k in hue_columns]
    also_panels = [k for k in hue_keys if k in faceted]
    if also_panels:  # a key that already makes the panels cannot also tell a panel's lines apart
        hue_keys = [k for k in hue_keys if k not in faceted]
        if s.hue is not None:
            notes.append(
                f"{', '.join(labels.key_title(k) for k in also_panels)} is a panel key, so it is not a colour too"
            )
    runs[VARIANT], extra = labels.label_runs(runs, hue_keys, [k for k in differing if k not in hue_keys])
    if extra and explicit:
        notes.append(
            f"runs differ in more than the hue ({', '.join(labels.key_title(k) for k in extra)}), so those "
            "keys are added to the labels of the runs they tell apart; facet them with --col/--row to colour "
            "by the hue alone",
        )
    label_keys = [*hue_keys, *extra]
    for name, keys_ in ((PANEL, col_keys), (PANEL_ROW, row_keys)):
        if keys_:
            runs[name], _ = labels.label_runs(
                runs, [dotted_key(info, k) if dotted_key(info, k) in runs else k for k in keys_]
            )
    return Labelled(
        runs=runs,
        keys=LabelKeys(col_keys, row_keys, label_keys, faceted),
        hue=VARIANT if label_keys else None,
        col=PANEL if col_keys else None,
        row=PANEL_ROW if row_keys else None,
        legend_title=labels.titles(hue_keys or extra) if label_keys else None,
        notes=tuple(notes),
        missing=tuple(dict.fromkeys(k for k in (*col_keys, *row_keys, *hue_columns) if k not in df.columns)),
    )


def say(note: str) -> str:
    """A note on the layout: printed on stderr, and returned as the report's line."""
    print(f"report: {note}", file=sys.stderr)
    return f"Note: {note}."


def _split_within_panels(runs: pd.DataFrame, keys: list[str], panel_keys: list[str]) -> list[str]:
    """The ``keys`` whose values differ within some panel: a key the panels already tell apart (the
    control's batch size, with its own panel) is not a variant of its own."""
    fkey = pd.Series(
        [labels.canon(tuple(r)) for r in runs[list(dict.fromkeys(panel_keys))].itertuples(index=False)],
        index=runs.index,
    )

    def splits(k: str) -> bool:
        values = runs[k].map(lambda v: repr(labels.canon((v,))))
        return bool(values.groupby(fkey).nunique().max() > 1)

    return [k for k in keys if splits(k)]


def _hue_columns(
    df: pd.DataFrame,
    info: LoadInfo,
    runs: pd.DataFrame,
    s: ReportSettings,
    strict_keys: Collection[str],
    differing: list[str],
) -> tuple[list[str], bool]:
    """The frame columns that colour the variants (:func:`_key_column` of each hue key, which may
    be a column no run has), and whether the layout named them."""
    if s.hue is None:
        # The loss type names a variant even when it does not vary (a grid over other keys then
        # reads "dapo, ε 0.2/0.28" rather than "all runs").
        lt = "trainer.loss_type" if "trainer.loss_type" in runs.columns else None
        return ([lt] if lt else list(differing)), False
    return [_key_column(df, k, k in strict_keys, info) for k in s.hue], True


def left_out_and_notes(
    df: pd.DataFrame, runs: pd.DataFrame, labelled: Labelled, unreadable: dict[str, int]
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """Every run the report does not count, one line each with its state and step, and the notes
    on the counted runs (unreadable files, missing steps, no learning signal).

    Returns:
        ``(runs, left_out, notes)``: a copy of ``runs`` with each diverged run's step and metric
        (``marker_step``, ``diverged_metric``) where its metrics went non-finite
        (:func:`analysis.states.divergence_point`), and the lines.
    """
    runs = runs.copy()
    left_out = []
    for rid, r in runs[(runs["state"] != states.DONE) | (runs["problem"] != "")].iterrows():
        step = None if pd.isna(r["last_step"]) else int(r["last_step"])
        if r["state"] == states.DIVERGED:
            marker = _as_int(r["marker_step"])
            dstep, dmetric = states.divergence_point(
                df, rid, marker, r["diverged_metric"] if isinstance(r["diverged_metric"], str) else None
            )
            runs.at[rid, "marker_step"] = dstep
            runs.at[rid, "diverged_metric"] = dmetric
            text = states.describe(r["state"], step=dstep, max_steps=r["max_steps"], metric=dmetric)
            if step is not None and dstep > step + 1:
                text += f"; its metrics end at step {step}"
        elif r["state"] == states.DONE:
            text = f"done, but {r['problem']}: not counted"
        else:
            text = states.describe(r["state"], step=step, max_steps=r["max_steps"])
        left_out.append(
            f"`{rid}` ({_where(r, labelled)}): {text}" + ("; included, marked" if r["included"] else "")
        )
    notes = [
        f"`{rid}` ({_where(runs.loc[rid], labelled)}): {unreadable[rid]} metrics file(s) unreadable (see Files "
        "not loaded), so some of its steps are missing from its numbers"
        for rid in runs.index[runs["included"]]
        if rid in unreadable
    ]
    for rid, r in runs[runs["included"] & ((runs["missing_steps"] > 0) | runs["no_signal"])].iterrows():
        if r["missing_steps"]:
            notes.append(
                f"`{rid}` ({_where(r, labelled)}): {r['missing_steps']} step(s) without metrics "
                "(a metrics file was unreadable and set aside)"
            )
        if r["no_signal"]:
            why = "zero reward variance in every group" if r["zero_variance"] else "grad_norm 0 on every step"
            notes.append(
                f"`{rid}` ({_where(r, labelled)}): no learning signal ({why}); never counted as improved"
            )
    return runs, left_out, notes


def included_rows(df: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of the counted runs, with their variant, panel and panel-row labels as ordered
    categoricals; rows are selected and labelled per run, through the run id's codes."""
    rid = df[layout.RUN_ID]
    run_names = [str(c) for c in rid.cat.categories]
    codes = rid.cat.codes.to_numpy()
    included_ids = set(runs.index[runs["included"]])
    mask = np.isin(codes, [k for k, name in enumerate(run_names) if name in included_ids])
    work = df.copy(deep=False) if mask.all() else df[mask].copy()
    work_codes = codes[mask] if not mask.all() else codes
    for name in (VARIANT, PANEL, PANEL_ROW):
        if name in runs.columns:
            per_code = runs[name].reindex(run_names)
            label_codes = np.asarray(pd.Categorical(per_code, categories=runs[name].cat.categories).codes)
            work[name] = pd.Categorical.from_codes(
                label_codes[work_codes], categories=runs[name].cat.categories, ordered=True
            )
    return work


def facet_orders(labelled: Labelled, runs: pd.DataFrame, inc: pd.DataFrame) -> Facets:
    """The layout of the figures: the label columns of ``labelled``, the variants, panels and
    panel rows that counted runs (``inc``) use, in label order, and the colours (no baseline and
    no on-policy panels yet). A label column not used has no order (None)."""

    def used_labels(name: str) -> tuple[str, ...]:
        used = set(inc[name].astype(str))
        return tuple(str(c) for c in runs[name].cat.categories if str(c) in used)

    hue_order = used_labels(VARIANT) if labelled.hue else None
    return Facets(
        hue=labelled.hue,
        col=labelled.col,
        row=labelled.row,
        legend_title=labelled.legend_title,
        hue_order=hue_order,
        col_values=used_labels(PANEL) if labelled.col else None,
        row_values=used_labels(PANEL_ROW) if labelled.row else None,
        colors=style.variant_colors(hue_order or ["all"]),
    )


def compared_lines(
    df: pd.DataFrame,
    info: LoadInfo,
    inc: pd.DataFrame,
    facets: Facets,
    s: ReportSettings,
    keys: LabelKeys,
    notes: Sequence[str],
) -> list[str]:
    """The report's opening lines: what is compared, against which baseline, over how many runs."""
    curve_keys = [c for c in (VARIANT, PANEL, PANEL_ROW) if c in inc.columns]
    per_variant = inc.groupby(curve_keys, observed=True).size() if curve_keys else pd.Series([len(inc)])
    seeds = seed_column(df)
    lines = [
        "Compared: "
        + (f"{facets.legend_title} ({' | '.join(facets.hue_order or ())})" if facets.hue else "all runs")
        + (f", in panels by {labels.titles([dotted_key(info, k) for k in keys.col])}" if keys.col else "")
        + (f" and rows by {labels.titles([dotted_key(info, k) for k in keys.row])}" if keys.row else "")
        + (f"; baseline {facets.baseline}" if facets.baseline else "; no baseline")
        + (
            f"; {count_range(per_variant)} {'' if s.include_unfinished else 'finished '}run(s) per curve"
            if len(inc)
            else "; no finished run"
        )
        + (f" (differing in {seeds})." if seeds and len(per_variant) and per_variant.max() > 1 else ".")
    ]
    if len(inc) and per_variant.max() < 2:
        lines.append("With one run per curve there are no confidence intervals.")
    if s.include_unfinished and (inc["state"] != states.DONE).any():
        lines.append(
            f"{int((inc['state'] != states.DONE).sum())} run(s) that did not finish are included "
            '(`--include-unfinished`), marked in the tables ("of which not finished") and on the final-score '
            "figure."
        )
    task = next((c for c in ("task.name", "task") if c in inc.columns), None)
    if task and task not in keys.faceted and inc[task].astype(str).nunique() > 1:
        lines.append(
            f"Note: these runs are on different tasks ({', '.join(sorted(inc[task].astype(str).unique()))}); "
            "final scores are compared within each task (stratified), curves and figures mix them: "
            f"`--col {task}` draws them apart."
        )
    lines.extend(f"Note: {n}." for n in notes)
    return lines


def _done_problems(runs: pd.DataFrame, metric: str | None) -> list[str]:
    """Why each run with a DONE marker is not a finished result ("" when it is one, or not DONE):
    contradicting markers, a DONE marker or metrics that stop before ``max_steps`` (unless DONE
    lists the missing steps), or no value of the score ``metric`` at all (not asked when
    ``metric`` is None: a finding reads its own metric)."""
    done = (runs["state"] == states.DONE).to_numpy()
    max_steps = np.array([np.nan if v is None else float(v) for v in runs["max_steps"]], dtype=np.float64)
    marker = np.array([np.nan if (m := _as_int(v)) is None else float(m) for v in runs["marker_step"]])
    last = runs["last_step"].to_numpy(dtype=np.float64)
    out = [""] * len(runs)
    flagged = np.flatnonzero(
        done
        & (
            (runs["conflict"] != "").to_numpy()
            | (marker < max_steps)
            | ((last < max_steps) & (runs["missing_steps"] == 0).to_numpy())
            | (~runs["scored"].to_numpy(dtype=bool) if metric is not None else False)
        )
    )
    for k in flagged:
        if runs["conflict"].iloc[k]:
            out[k] = runs["conflict"].iloc[k]
        elif marker[k] < max_steps[k]:
            out[k] = f"its DONE marker says {int(marker[k])} of {int(max_steps[k])} steps"
        elif last[k] < max_steps[k] and not runs["missing_steps"].iloc[k]:
            out[k] = f"its metrics end at step {int(last[k])} of {int(max_steps[k])}"
        else:
            out[k] = f"no {metric} logged"
    return out


def _as_int(v: Any) -> int | None:
    """A config or marker value as a step count, or None when it is not a finite whole number."""
    if isinstance(v, bool) or labels.is_missing(v):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return int(f) if np.isfinite(f) and f.is_integer() and f >= 0 else None


def count_range(counts: pd.Series) -> str:
    lo, hi = int(counts.min()), int(counts.max())
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _where(r: pd.Series, facets: Labelled | Facets) -> str:
    """Where run ``r`` (a row with its label columns) sits: its variant, panel and panel row
    labels, those ``facets`` uses, joined by "; " ("all runs" without any)."""
    parts = [
        str(r[c])
        for c in (VARIANT, PANEL, PANEL_ROW)
        if c in r.index and getattr(facets, {VARIANT: "hue", PANEL: "col", PANEL_ROW: "row"}[c])
    ]
    return "; ".join(parts) if parts else "all runs"
