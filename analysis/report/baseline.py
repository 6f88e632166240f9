"""The baseline variant (by ``KEY=VALUE`` or label) and the table of the compared variants."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis import labels, states
from analysis.load import LoadInfo
from analysis.panels import Facets
from analysis.report.data import PANEL, PANEL_ROW, VARIANT
from analysis.report.runs import dotted_key, resolve_column
from analysis.settings.report import baseline_pairs
from analysis.settings.report_values import ReportError


def baseline_label(
    inc: pd.DataFrame,
    df: pd.DataFrame,
    hue: str | None,
    text: str | None,
    label_keys: Sequence[str] = (),
    *,
    info: LoadInfo,
    runs: pd.DataFrame | None = None,
    strict: bool = False,
) -> tuple[str | None, list[str]]:
    """The variant label of the baseline runs among the included runs, or None (with a note).

    ``text`` None is the default, ``loss_type=grpo``, which says nothing when no run matches in a
    grid that does not compare loss types; a baseline the user gave always says why it was not
    found.

    Returns:
        ``(label or None, the report's notes on the choice, one line each)``.

    Raises:
        ReportError: ``strict`` (typed on the command line) and ``text`` names no variant, no key or
            no value of any run with metrics (``runs``); the message lists what would.
    """
    explicit = text is not None
    text = text if explicit else "loss_type=grpo"
    if hue is None or inc.empty:
        return None, []
    every = inc if runs is None else runs
    pairs = baseline_pairs(text)
    if pairs is None:
        return _baseline_by_name(text, inc, every, strict=strict)
    matched, notes = _match_baseline(
        text, pairs, inc, every, df, label_keys, info=info, strict=strict, explicit=explicit
    )
    if matched is None:
        return None, notes
    match, match_any = matched
    hit = inc.loc[match, VARIANT].astype(str)
    if hit.empty:
        if strict and not match_any.any():
            key = pairs[0][0]
            col = resolve_column(df, key, info)
            raise ReportError(
                f"--baseline {text!r}: no run has it; {key} is "
                + ", ".join(sorted({labels.format_value(v) for v in every[col]}))
                + " in these runs"
            )
        if explicit or "loss_type" in df.columns:  # the default is news only where loss types vary
            return None, [_note(f"no finished run has {text}; no baseline")]
        return None, []
    other = [k for k, _ in pairs if dotted_key(info, resolve_column(df, k, info)) not in label_keys]
    if other:
        notes.append(
            _note(
                f"baseline keys {', '.join(other)} do not name a variant (they are panels or constant), so they "
                "only choose its label; each panel compares with that label in the same panel",
            )
        )
    counts = hit.value_counts()
    value = pairs[0][1] if len(pairs) == 1 else None
    if value is not None and value in counts.index:
        return value, notes
    if len(counts) > 1:
        notes.append(_note(f"baseline {text} spans {len(counts)} variants; using {counts.index[0]!r}"))
    return str(counts.index[0]), notes


def _baseline_by_name(
    text: str, inc: pd.DataFrame, every: pd.DataFrame, *, strict: bool
) -> tuple[str | None, list[str]]:
    """A baseline given as a variant label: ``text`` if an included run has it, else None with a
    note; returns ``(label or None, notes)``.

    Raises:
        ReportError: ``strict`` and no run of ``every`` has that label.
    """
    if text in {str(v) for v in inc[VARIANT].astype(str).unique()}:
        return text, []
    if strict and text not in set(every[VARIANT].astype(str)):
        raise ReportError(
            f"--baseline {text!r} names no variant; give one of "
            + ", ".join(repr(v) for v in every[VARIANT].astype(str).unique())
            + " or KEY=VALUE (e.g. loss_type=grpo)"
        )
    return None, [_note(f"no finished variant is labelled {text!r}; no baseline")]


def _match_baseline(
    text: str,
    pairs: Sequence[tuple[str, str]],
    inc: pd.DataFrame,
    every: pd.DataFrame,
    df: pd.DataFrame,
    label_keys: Sequence[str],
    *,
    info: LoadInfo,
    strict: bool,
    explicit: bool,
) -> tuple[tuple[np.ndarray, np.ndarray] | None, list[str]]:
    """Which included runs (``inc``) and which runs of ``every`` have every ``KEY=VALUE`` of
    ``pairs``: two bool arrays, or None (with a note when ``explicit``) when a key is not a
    setting of these runs; and the notes.

    Raises:
        ReportError: ``strict`` and a key is not a setting of these runs.
    """
    match = np.ones(len(inc), dtype=bool)
    match_any = np.ones(len(every), dtype=bool)
    for key, value in pairs:
        try:
            col = resolve_column(df, key, info)
        except ReportError:
            col = None
        if col is None or col not in inc.columns:
            if strict:
                raise ReportError(
                    f"--baseline {text!r}: {key!r} is not a setting of these runs; keys that tell variants apart: "
                    + (", ".join(dotted_key(info, k) for k in label_keys) or "none")
                )
            if explicit:
                return None, [_note(f"baseline key {key!r} is not a setting of these runs; no baseline")]
            return None, []
        match &= inc[col].map(lambda v, t=value: _value_matches(v, t)).to_numpy(dtype=bool)
        match_any &= every[col].map(lambda v, t=value: _value_matches(v, t)).to_numpy(dtype=bool)
    return (match, match_any), []


def _value_matches(v: Any, text: str) -> bool:
    """Whether config value ``v`` is what ``text`` (from ``--baseline``) says: ``2``, ``2.0`` and
    ``2`` agree; ``false``/``False`` match False; strings compare as written."""
    if labels.is_missing(v):
        return text.lower() in ("none", "null", "(none)", "")
    if labels.format_value(v) == text or str(v) == text:
        return True
    try:
        import yaml

        parsed = yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - any unparsable text is simply not this value
        return False
    if isinstance(v, (bool, np.bool_)) or isinstance(parsed, bool):
        return isinstance(parsed, bool) and isinstance(v, (bool, np.bool_)) and bool(v) == parsed
    if isinstance(parsed, (int, float)) and isinstance(v, (int, float, np.integer, np.floating)):
        return float(v) == float(parsed)
    return False


def _note(text: str) -> str:
    """A note on the baseline: printed on stderr, and returned as the report's line."""
    print(f"report: {text}; pick one with --baseline KEY=VALUE", file=sys.stderr)
    return f"Note: {text} (pick one with `--baseline KEY=VALUE`)."


def variants_table(
    runs: pd.DataFrame, keys: list[str], facets: Facets, placed: pd.DataFrame
) -> pd.DataFrame | None:
    """Each (variant, facet) label with the full values of the keys behind it, its finished runs
    and the others (runs with metrics that did not finish, and ``placed`` runs without metrics)."""
    if not keys and not facets.col and not facets.row:
        return None
    cols = [c for c in (VARIANT, PANEL, PANEL_ROW) if c in runs.columns]
    done = ((runs["state"] == states.DONE) & (runs["problem"] == "")).to_numpy()
    key_values = runs[keys] if keys else None
    without = Counter(tuple(str(v) for v in r) for r in placed[cols].itertuples(index=False))
    rows = []
    for key, pos in runs.groupby(cols, observed=True, sort=True).indices.items():
        key = tuple(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        finished = int(done[pos].sum())
        rows.append(
            {
                **dict(zip(cols, key, strict=True)),
                "settings": labels.describe_combo(keys, list(key_values.iloc[pos[0]])) if keys else "",
                "finished": finished,
                "other": len(pos) - finished + without[key],
            }
        )
    return pd.DataFrame(rows)
