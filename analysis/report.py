"""``grpo-harness report``: a grid's figures and tables, written to ``results/<grid>/report/``.

:func:`make_report` loads the runs, draws the reward curve, the training-dynamics panels and the
``w_seq`` dynamics (PNG + PDF), writes the timing, final-performance, learning-check (and, with a
target, time-to-target) tables as markdown, CSV and LaTeX, and an ``index.md`` that shows each
output with one line saying what it compares. Colours per variant are fixed once for the whole
report.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis import curves, style, tables
from analysis.load import SkippedFileWarning, list_runs, load, read_grid, seed_column
from harness import layout

__all__ = ["ReportError", "add_arguments", "main", "make_report", "parse_baseline"]


class ReportError(ValueError):
    """An argument of the report does not fit the results (unknown axis, bad x)."""


_X_CHOICES = ("step", "tokens", "time")


#: What a report writes into ``results/<grid>/report/`` (and replaces on the next report).
REPORT_SUFFIXES = (".md", ".csv", ".tex", ".png", ".pdf")


def parse_baseline(text: str | None) -> tuple[str | None, str | None]:
    """``"loss_type=grpo"`` → ``("loss_type", "grpo")``; ``"grpo"`` → ``(None, "grpo")`` (the hue)."""
    if not text:
        return None, None
    if "=" in text:
        key, value = text.split("=", 1)
        return key.strip() or None, value.strip()
    return None, text.strip()


def _resolve_column(df: pd.DataFrame, name: str | None) -> str | None:
    """A column for a grid axis named as given, by alias, or by its last dotted component."""
    if name is None:
        return None
    if name in df.columns:
        return name
    ends = [c for c in df.columns if isinstance(c, str) and c.endswith("." + name)]
    if len(ends) == 1:
        return ends[0]
    raise ReportError(
        f"no column {name!r} in the results; grid axes: {sorted(df.attrs.get('varying', []))}, "
        f"aliases: {sorted(df.attrs.get('aliases', {}))}"
    )


def _differing_keys(df: pd.DataFrame, exclude: set[str]) -> list[str]:
    """Config columns whose value differs between runs (seed-like and excluded keys left out)."""
    per_run = df.drop_duplicates(layout.RUN_ID)
    out = []
    for c in df.attrs.get("config_columns", []):
        if c in exclude or c == "grid" or c == "seed" or c.endswith(".seed"):
            continue
        if per_run[c].astype(object).map(repr).nunique() > 1:
            out.append(c)
    return out


def _short_names(keys: list[str], df: pd.DataFrame) -> dict[str, str]:
    """Display name per key: its alias, else its last dotted component when unique among ``keys``."""
    alias_of = {full: alias for alias, full in df.attrs.get("aliases", {}).items()}
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: alias_of.get(k) or (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def _add_variant_column(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """A ``variant`` column naming each run by the values of ``keys`` ("loss_type=grpo, beta=0").

    The loss type comes first when it is among the keys; keys a run leaves unset (the trainer's
    default applies) are left out of its label rather than shown as missing. A run that sets none
    of them is labelled "(defaults)".
    """
    per_run = df.drop_duplicates(layout.RUN_ID).set_index(layout.RUN_ID)
    names = _short_names(keys, df)
    keys = sorted(keys, key=lambda k: names[k] != "loss_type")
    labels = {}
    for rid, row in per_run.iterrows():
        parts = [f"{names[k]}={curves.format_value(row[k])}" for k in keys if not pd.isna(row[k])]
        labels[rid] = ", ".join(parts) if parts else "(defaults)"
    out = df.copy()
    out["variant"] = df[layout.RUN_ID].astype(object).map(labels).astype("category")
    out.attrs = dict(df.attrs)
    return out


def _baseline_label(df: pd.DataFrame, hue: str | None, key: str | None, value: str | None) -> str | None:
    """The hue label of the baseline runs (the most common one among runs matching key=value)."""
    if value is None or hue is None:
        return None
    if key is None:
        if value not in set(curves.variant_labels(df[hue]).astype(str)):
            warnings.warn(f"no variant is labelled {value!r}; no baseline", stacklevel=3)
            return None
        return value
    try:
        col = _resolve_column(df, key)
    except ReportError:
        warnings.warn(f"baseline key {key!r} is not a column; no baseline", stacklevel=3)
        return None
    per_run = df.drop_duplicates(layout.RUN_ID)
    match = per_run[curves.variant_labels(per_run[col]).astype(str) == value]
    if match.empty:
        warnings.warn(f"no run has {key}={value}; no baseline", stacklevel=3)
        return None
    labels = pd.Series(curves.variant_labels(match[hue]).astype(str))
    counts = labels.value_counts()
    if len(counts) > 1:
        warnings.warn(
            f"baseline {key}={value} spans {len(counts)} variants; using {counts.index[0]!r}", stacklevel=3
        )
    return str(counts.index[0])


def make_report(
    grid_dir: str | Path,
    *,
    run_ids: Sequence[str] | None = None,
    all_runs: bool = False,
    baseline: str | None = "loss_type=grpo",
    x: str = "step",
    hue: str | None = "loss_type",
    col: str | None = None,
    row: str | None = None,
    metric: str = "reward",
    target: float | None = None,
    ci: str = "t",
    smoothing: dict[str, float] | None = None,
) -> Path:
    """Write the figures, tables and ``index.md`` of a grid to ``<grid_dir>/report/``.

    Args:
        grid_dir: ``results/<grid>``.
        run_ids: runs to include; default the ``run_ids`` of ``grid.json`` (the grid as currently
            specified), or every run folder when there is no ``grid.json``.
        all_runs: include every run folder, and label runs by every config key that differs
            between them (a ``variant`` column used as hue when more than the hue differs).
        baseline: ``"key=value"`` (e.g. ``"loss_type=grpo"``) or a hue value; speedups and the
            probability of improvement are relative to it. None for no baseline.
        x: x axis of the curves: ``"step"``, ``"tokens"`` (generated) or ``"time"`` (seconds).
        hue: grid axis whose values are the compared variants (alias or dotted key).
        col, row: grid axes faceting the reward curve into columns/rows (also table keys).
        metric: the reward-like metric of the curve and of the performance tables.
        target: when given, also write the time-to-target table for ``metric >= target``.
        ci: ``"t"`` (Student-t, default) or ``"bootstrap"`` for the curve bands.
        smoothing: ``{"window": n}`` (rolling mean over n logged points) or ``{"ema": alpha}``, applied
            to each run's reward curve before averaging over seeds; None (default) plots raw values.

    Returns:
        The report folder.

    Raises:
        FileNotFoundError: if ``grid_dir`` has no ``runs/`` folder.
        ReportError: (a ValueError) if ``x`` is unknown or ``hue``/``col``/``row`` is not a column.
    """
    grid_dir = Path(grid_dir)
    if x not in _X_CHOICES:
        raise ReportError(f"x must be one of {_X_CHOICES}, got {x!r}")
    if not (grid_dir / layout.RUNS_DIR).is_dir():
        raise FileNotFoundError(f"no '{layout.RUNS_DIR}' folder in {grid_dir} (is it results/<grid>?)")
    try:
        grid_info = read_grid(grid_dir)
        if grid_info is not None and not isinstance(grid_info, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        raise ReportError(f"{grid_dir / layout.GRID_FILE}: {e}; fix or delete it, or use --all") from e
    out = grid_dir / layout.REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():  # a previous report's figures and tables must not outlive their data
        if old.is_file() and old.suffix in REPORT_SUFFIXES:
            old.unlink()

    if all_runs:
        ids = list_runs(grid_dir)
        run_set = f"all {len(ids)} run folder(s) in {grid_dir}/{layout.RUNS_DIR}"
    elif run_ids is not None:
        ids = list(run_ids)
        run_set = f"{len(ids)} run(s) given on the command line"
    elif grid_info and grid_info.get("run_ids") is not None:
        ids = list(grid_info["run_ids"])
        run_set = f"the {len(ids)} run(s) of {layout.GRID_FILE} (the grid as currently specified)"
    else:
        ids = list_runs(grid_dir)
        run_set = f"all {len(ids)} run folder(s) (no {layout.GRID_FILE})"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedFileWarning)
        df = load(grid_dir, ids)
    for w in caught:
        if issubclass(w.category, SkippedFileWarning):
            print(f"report: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    lines = [f"# Report: {grid_info.get('name', grid_dir.name) if grid_info else grid_dir.name}", ""]
    lines.append(f"Runs: {run_set}; {df[layout.RUN_ID].nunique()} with metrics, {len(df)} logged steps.")
    if df.attrs.get("missing_runs"):
        lines.append(f"Not found on disk (not started?): {len(df.attrs['missing_runs'])} run(s).")
    lines.append("")

    if df.empty:
        lines.append("No metrics yet: nothing to plot.")
        _write_index(out, lines, df)
        return out

    try:
        curves.x_values(df, x)
    except KeyError as e:
        raise ReportError(f"--x {x}: {e.args[0]}") from e
    if metric not in df.columns:
        known = sorted(c for c in df.columns if c.startswith(("reward", "eval/", "rewards/")))
        raise ReportError(f"--metric {metric}: no run logged it; logged metrics include {', '.join(known)}")
    hue_col = _resolve_hue(df, hue)
    col_col = _resolve_column(df, col)
    row_col = _resolve_column(df, row)
    # A grid can vary more than the hue (the clip range with num_iterations, GSPO beside grpo): then
    # lines are labelled by every key that differs, so no two variants share a line.
    aliases = df.attrs.get("aliases", {})
    faceted = {name for c in (col_col, row_col) if c for name in (c, aliases.get(c, c))}
    differing = [k for k in _differing_keys(df, faceted) if not k.startswith("harness.")]
    hue_key = aliases.get(hue_col, hue_col) if hue_col else None
    others = [k for k in differing if k != hue_key]
    if others:
        df = _add_variant_column(df, differing)
        hue_col = "variant"
        lines.append(f"Variants are labelled by the config keys that differ: {', '.join(differing)}.")
        if hue != "loss_type" and hue_key:  # an explicit --hue that cannot be the only label
            note = (
                f"runs differ in more than --hue {hue} ({', '.join(others)}), so lines are labelled by "
                "every differing key; facet the others with --col/--row to colour by it alone"
            )
            print(f"report: {note}", file=sys.stderr)
            lines.append(f"Note: {note}.")
        lines.append("")
    base_key, base_value = parse_baseline(baseline)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        base_label = _baseline_label(df, hue_col, base_key, base_value)
    for w in caught:  # the user's to act on, not a code location: a line in the report and on stderr
        print(f"report: {w.message}; pick one with --baseline KEY=VALUE", file=sys.stderr)
        lines.append(f"Note: {w.message} (pick one with `--baseline KEY=VALUE`).")
        lines.append("")

    hue_labels = list(curves.variant_labels(df[hue_col]).categories) if hue_col else ["all"]
    colors = style.variant_colors(hue_labels)
    seeds = seed_column(df)
    runs_frame = df.drop_duplicates(layout.RUN_ID)
    if hue_col:
        per_variant = pd.Series(curves.variant_labels(runs_frame[hue_col])).value_counts()
    else:
        per_variant = pd.Series([len(runs_frame)])
    lo_n, hi_n = int(per_variant.min()), int(per_variant.max())
    lines.append(
        f"Compared: {hue_col or 'all runs'} ({' | '.join(hue_labels)})"
        + (f"; baseline {base_label}" if base_label else "; no baseline")
        + f"; {lo_n if lo_n == hi_n else f'{lo_n}-{hi_n}'} run(s) per variant"
        + (f" (differing in {seeds})." if seeds and hi_n > 1 else ".")
    )
    if hi_n < 2:
        lines.append("With one run per variant there are no confidence intervals.")
    lines.append("")

    def section(title: str, what: str) -> None:
        lines.extend([f"## {title}", "", what, ""])

    # Reward curve.
    agg = curves.aggregate(
        df,
        metric,
        x=x,
        by=list(dict.fromkeys(c for c in (hue_col, col_col, row_col) if c)),
        ci=ci,
        smoothing=smoothing,
    )
    fig, _ = curves.plot_curves(
        df, metric, x=x, hue=hue_col, col=col_col, row=row_col, colors=colors, agg=agg
    )
    stem = f"{_safe(metric)}_{x}"
    style.save(fig, out / stem)
    section(
        f"{metric} vs {curves.X_LABELS[x]}",
        f"Compares the {metric} learning curves of the variants. {agg.attrs['caption']}",
    )
    lines.extend([f"![{metric}]({stem}.png)", "", f"PDF: [{stem}.pdf]({stem}.pdf)", ""])

    # Training dynamics.
    dyn = [m for m in curves.DYNAMICS_METRICS if m in df.columns and df[m].notna().any()]
    fig, _ = curves.plot_panels(
        df, curves.DYNAMICS_METRICS, x=x, hue=hue_col, col=col_col, colors=colors, ci=ci
    )
    style.save(fig, out / f"dynamics_{x}")
    missing = [m for m in curves.DYNAMICS_METRICS if m not in dyn]
    section(
        "Training dynamics",
        "Compares what the losses do to the policy: "
        + ", ".join(curves.metric_label(m) for m in dyn)
        + (f". Not logged by any of these runs, so not drawn: {', '.join(missing)}" if missing else "")
        + ". Same line and band as above.",
    )
    lines.extend([f"![dynamics](dynamics_{x}.png)", ""])

    # w_seq.
    fig, _ = curves.plot_wseq(df, hue=hue_col, x=x, colors=colors)
    style.save(fig, out / "w_seq")
    section(
        "Sequence importance ratio w_seq",
        "Compares how far each variant's sequence-level ratio w_seq = pi_theta / pi_old drifts from 1: "
        "median over runs of the per-step p05-p95 (band) and p50 (line), log scale.",
    )
    lines.extend(["![w_seq](w_seq.png)", ""])

    # Tables.
    by = list(dict.fromkeys(c for c in (hue_col, col_col, row_col) if c))
    timing = tables.timing_table(df, by=by, baseline=base_label)
    tables.write_table(timing, out / "timing", caption=_timing_caption(base_label))
    section("Timing", _timing_caption(base_label))
    lines.extend([tables.to_markdown(timing), "Files: timing.md, timing.csv, timing.tex", ""])

    perf = tables.final_performance_table(df, metric, by=by, baseline=base_label)
    tables.write_table(perf, out / "final_performance")
    section("Final performance", perf.attrs["caption"])
    lines.extend([tables.to_markdown(perf), "Files: final_performance.md/.csv/.tex", ""])

    check = tables.learning_check(df, metric, by=by)
    summary = tables.learning_summary(check, by=by)
    tables.write_table(summary, out / "learning_check", extra_md={"Per run": check})
    check.to_csv(out / "learning_check_runs.csv", index=False)
    section("Learning check", "Did each variant learn at all? " + summary.attrs["caption"])
    lines.extend(
        [tables.to_markdown(summary), "Files: learning_check.md/.csv/.tex, learning_check_runs.csv", ""]
    )

    if target is not None:
        ttt = tables.time_to_target_table(df, target, metric=metric, by=by, baseline=base_label)
        tables.write_table(ttt, out / "time_to_target")
        section(
            f"Time to {metric} >= {target:g}",
            "Compares how fast each variant gets there. " + ttt.attrs["caption"],
        )
        lines.extend([tables.to_markdown(ttt), "Files: time_to_target.md/.csv/.tex", ""])

    _write_index(out, lines, df)
    return out


def _resolve_hue(df: pd.DataFrame, hue: str | None) -> str | None:
    try:
        return _resolve_column(df, hue)
    except ReportError:
        if hue == "loss_type":
            # The default hue on a grid that does not vary the loss: one line per run set.
            return None
        raise


def _timing_caption(baseline: str | None) -> str:
    return (
        "Compares cost per variant: wall-clock seconds per optimizer step including generation "
        "(time/step_s; mean per step and total per run), median TRL step_time (s), generated and trained "
        "tokens per second, peak memory (MB, max over runs); means over runs"
        + (f"; speedup = {baseline} s/step / variant s/step." if baseline else ".")
        + " Runs that shared the machine with other runs are slower per step: compare timings of runs "
        "executed alike (e.g. `executor.max_parallel: 1`, or one GPU per run)."
    )


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)


def _write_index(out: Path, lines: list[str], df: pd.DataFrame) -> None:
    skipped = df.attrs.get("skipped", [])
    if skipped:
        lines.extend(["## Files not loaded", ""])
        lines.extend(f"- `{path}`: {reason}" for path, reason in skipped)
        lines.append("")
    (out / "index.md").write_text("\n".join(lines))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``."""
    parser.add_argument("grid", type=Path, help="a grid's results folder, results/<grid>")
    parser.add_argument(
        "--baseline",
        default="loss_type=grpo",
        help="reference variant, KEY=VALUE or a hue value (default: %(default)s)",
    )
    parser.add_argument(
        "--x", choices=_X_CHOICES, default="step", help="x axis of the curves (default: %(default)s)"
    )
    parser.add_argument(
        "--hue", default="loss_type", help="grid axis compared as lines (default: %(default)s)"
    )
    parser.add_argument("--col", default=None, help="grid axis faceted into columns")
    parser.add_argument("--row", default=None, help="grid axis faceted into rows")
    parser.add_argument("--metric", default="reward", help="curve and table metric (default: %(default)s)")
    parser.add_argument(
        "--target", type=float, default=None, help="also tabulate time to reach METRIC >= TARGET"
    )
    parser.add_argument(
        "--ci", choices=("t", "bootstrap"), default="t", help="curve band (default: %(default)s)"
    )
    parser.add_argument(
        "--smooth",
        default=None,
        metavar="window=N|ema=A",
        help="smooth each run's reward curve before averaging: rolling mean of N points or EMA with alpha A",
    )
    parser.add_argument(
        "--all",
        dest="all_runs",
        action="store_true",
        help="every run folder, not just the grid as currently specified; runs labelled by what differs",
    )


def main(args: argparse.Namespace) -> int:
    """Run :func:`make_report` from parsed arguments; print where the outputs went.

    Returns:
        0 on success, 2 when the folder or an argument is invalid (message on stderr).
    """
    smoothing = None
    if getattr(args, "smooth", None):
        kind, _, value = args.smooth.partition("=")
        try:
            if kind not in ("window", "ema"):
                raise ValueError
            smoothing = {kind: int(value) if kind == "window" else float(value)}
            if (kind == "window" and smoothing[kind] < 1) or (kind == "ema" and not 0 < smoothing[kind] <= 1):
                raise ValueError
        except ValueError:
            print(
                f"report: --smooth {args.smooth!r}: use window=N (e.g. window=20) or ema=A (e.g. ema=0.1)",
                file=sys.stderr,
            )
            return 2
    target = getattr(args, "target", None)
    if target is not None and not math.isfinite(target):
        print(f"report: --target {target}: give a finite {args.metric} value (e.g. 0.5)", file=sys.stderr)
        return 2
    try:
        out = make_report(
            args.grid,
            smoothing=smoothing,
            all_runs=getattr(args, "all_runs", False),
            baseline=args.baseline,
            x=args.x,
            hue=args.hue,
            col=args.col,
            row=args.row,
            metric=getattr(args, "metric", "reward"),
            target=getattr(args, "target", None),
            ci=getattr(args, "ci", "t"),
        )
    except (FileNotFoundError, NotADirectoryError, ReportError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    files = sorted(p.name for p in out.iterdir() if p.is_file())
    print(f"report written to {out}/ ({len(files)} files); open {out / 'index.md'}")
    return 0
