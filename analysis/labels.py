"""Short, readable labels for variants and facets, built from the config keys a grid varies.

A legend entry should read like the paper's text: ``ε 0.2/0.28``, ``μ=2``, ``gspo``,
``k/λ +2/3 −3/2``, not ``trainer.epsilon=0.2, trainer.epsilon_high=0.28``. The full keys and
values go in the report's variants table and captions, where there is room.

Rules, in order:

1. Known combinations of keys have one compact form (:data:`COMBINED`): the clip range
   ``(epsilon, epsilon_high)`` is ``ε lo/hi``; VESPO's four shape parameters are
   ``k/λ +k₊/λ₊ −k₋/λ₋``.
2. A single key is ``symbol=value`` with the field's usual symbol (:data:`SYMBOLS`), the value
   alone for categorical keys such as ``loss_type``, or a phrase for flags (``no sync``).
3. Several keys are joined with ", "; keys a run does not set (NaN: TRL's default applies) are
   left out of the label.
4. Named variants (:data:`NAMED_VARIANTS`): GSPO is ``loss_type: grpo`` with sequence-level
   importance sampling, and is called ``gspo``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness import layout
from harness.trl_boundary import NAMED_LOSS_VARIANTS

NONE_LABEL = "(none)"

__all__ = [
    "COMBINED",
    "NAMED_VARIANTS",
    "NONE_LABEL",
    "SYMBOLS",
    "canon",
    "combo_label",
    "format_value",
    "is_missing",
    "key_title",
    "label_runs",
    "metric_label",
    "sort_key",
]

#: Usual symbol or short name of a setting (dotted key) in a label. ``""``: the value alone.
SYMBOLS: dict[str, str] = {
    "trainer.loss_type": "",
    "trainer.epsilon": "ε",
    "trainer.epsilon_high": "ε_high",
    "trainer.delta": "δ",
    "trainer.num_iterations": "μ",
    "trainer.gradient_accumulation_steps": "GA",
    "trainer.steps_per_generation": "spg",
    "trainer.per_device_train_batch_size": "batch",
    "trainer.num_generations": "G",
    "trainer.beta": "β",
    "trainer.learning_rate": "lr",
    "trainer.temperature": "T",
    "trainer.importance_sampling_level": "IS",
    "trainer.ref_model_mixup_alpha": "α",
    "trainer.vespo_k_pos": "k+",
    "trainer.vespo_lambda_pos": "λ+",
    "trainer.vespo_k_neg": "k−",
    "trainer.vespo_lambda_neg": "λ−",
    "trainer.max_completion_length": "max len",
    "trainer.scale_rewards": "scale",
    "seed": "seed",
    "model": "",
    "task.name": "",
}

#: Keys that have one compact joint form, and how to write it from their values (in key order).
COMBINED: dict[tuple[str, ...], Any] = {
    ("trainer.epsilon", "trainer.epsilon_high"): lambda lo, hi: f"ε {lo}/{hi}",
    (
        "trainer.vespo_k_pos",
        "trainer.vespo_lambda_pos",
        "trainer.vespo_k_neg",
        "trainer.vespo_lambda_neg",
    ): lambda kp, lp, kn, ln: f"k/λ +{kp}/{lp} −{kn}/{ln}",
}

#: Variants with a name of their own: ``({dotted key: value, ...}, name)``, the named variants of
#: TRL's losses (:data:`harness.trl_boundary.NAMED_LOSS_VARIANTS`: GSPO). The name replaces the
#: label of the key it is matched on first (``loss_type`` here) when every key matches.
NAMED_VARIANTS: tuple[tuple[dict[str, Any], str], ...] = tuple(
    ({f"trainer.{k}": v for k, v in settings.items()}, name) for name, settings in NAMED_LOSS_VARIANTS.items()
)

_METRIC_LABELS: dict[str, str] = {
    "reward": "reward",
    "reward_std": "reward std within group",
    "eval/accuracy": "eval accuracy (greedy)",
    "eval/sampled_accuracy": "eval accuracy (sampled)",
    "entropy": "token entropy (nats)",
    "kl": "KL to reference",
    "clip_ratio/region_mean": "clipped fraction (any)",
    "clip_ratio/low_mean": "clipped fraction (low)",
    "clip_ratio/high_mean": "clipped fraction (high)",
    "cispo_clip_ratio": "CISPO clipped fraction",
    "completions/mean_length": "completion length (tokens)",
    "completions/mean_length_correct": "correct length (tokens)",
    "completions/mean_length_incorrect": "incorrect length (tokens)",
    "completions/clipped_ratio": "truncated (fraction)",
    "vespo/phi_seq_mean": "VESPO phi_seq (mean)",
    "w_seq/ess_frac": "ESS/N of w_seq",
    "dynamic_sampling/reward_generated": "reward of every completion generated",
    "dynamic_sampling/groups_kept": "groups kept (dynamic sampling)",
    "dynamic_sampling/gen_batches": "generation batches (dynamic sampling)",
    "frac_reward_zero_std": "groups with zero reward std",
    "loss": "loss",
    "grad_norm": "gradient norm",
    "time/step_s": "seconds per step",
}


def metric_label(metric: str) -> str:
    """Human-readable axis label for a metric column (the column name itself when unknown);
    ``eval/pass@k`` is ``eval pass@k (sampled)``."""
    k = layout.pass_at_k(metric)
    return f"eval pass@{k} (sampled)" if k is not None else _METRIC_LABELS.get(metric, metric)


def is_missing(v: Any) -> bool:
    """None, NaN or pandas' NA: a key the run does not set."""
    if v is None or v is pd.NA:
        return True
    return isinstance(v, (float, np.floating)) and math.isnan(v)


def format_value(v: Any) -> str:
    """A config value as a short label: ``1.0`` → ``"1"``, ``1e-05`` → ``"1e-05"``, ``True`` → ``"True"``;
    a list (or its JSON text, as a loaded config column holds it) joined by ``+``, a mapping with a
    ``name`` as ``name(key=value, ...)``: ``task.rewards`` ``[correctness, {name: soft_overlong,
    soft_punish_cache: 8}]`` → ``"correctness+soft_overlong(soft_punish_cache=8)"``."""
    if isinstance(v, str) and v.startswith("[") and v.endswith("]"):
        try:
            v = json.loads(v)
        except ValueError:
            return v
    if isinstance(v, list | tuple):
        return "+".join(format_value(x) for x in v)
    if isinstance(v, dict):
        rest = ", ".join(f"{k}={format_value(x)}" for k, x in v.items() if k != "name")
        return f"{v['name']}({rest})" if "name" in v and rest else str(v.get("name", rest))
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (float, np.floating)) and float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}"
    return str(v)


def sort_key(v: Any) -> tuple[int, Any]:
    """Order of values in legends and tables: numbers numerically, then strings, missing last."""
    if is_missing(v):
        return (2, "")
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        return (0, float(v))
    return (1, str(v))


def key_title(key: str) -> str:
    """A dotted key as a legend or axis title: its last component (``trainer.epsilon`` → ``epsilon``),
    the section a ``name`` names (``task.name`` → ``task``) or an ``enable`` turns on
    (``dynamic_sampling.enable`` → ``dynamic_sampling``)."""
    parts = key.rsplit(".", 2)
    return parts[-2] if parts[-1] in ("name", "enable") and len(parts) > 1 else parts[-1]


def _single(key: str, v: Any) -> str:
    text = format_value(v)
    if key == "trainer.sync_ref_model":
        return "sync" if bool(v) else "no sync"
    if key == "trainer.ref_model_sync_steps":
        return f"sync every {text}"
    if key == "harness.ref_model_sync_every":
        return f"({text})"
    sym = SYMBOLS.get(key, key_title(key))
    return text if sym == "" else f"{sym}={text}"


def combo_label(keys: Sequence[str], values: Sequence[Any]) -> str:
    """The label of one combination of values of ``keys`` (see the module's rules).

    Args:
        keys: dotted keys, in display order.
        values: one value per key; missing values (None/NaN) are left out.

    Returns:
        A short string; :data:`NONE_LABEL` when every value is missing.
    """
    pairs = dict(zip(keys, values, strict=True))
    for named, name in NAMED_VARIANTS:
        if all(k in pairs and pairs[k] == v for k, v in named.items()):
            first = next(iter(named))
            pairs = {k: v for k, v in pairs.items() if k not in named or k == first}
            pairs[first] = _Named(name)
    # A combined form stands where its first key stands, so labels keep the keys' order
    # ("dapo, ε 0.2/0.28" as "dapo, ε=0.1").
    combined_at: dict[str, str] = {}
    done: set[str] = set()
    for combo, fmt in COMBINED.items():
        if all(k in pairs and not is_missing(pairs[k]) for k in combo):
            first = min(combo, key=lambda k: list(pairs).index(k))
            combined_at[first] = fmt(*(format_value(pairs[k]) for k in combo))
            done.update(combo)
    parts: list[str] = []
    for k in pairs:
        if k in combined_at:
            parts.append(combined_at[k])
            continue
        if k in done or is_missing(pairs[k]):
            continue
        v = pairs[k]
        if (
            k == "trainer.sync_ref_model"
            and bool(v)
            and not is_missing(pairs.get("trainer.ref_model_sync_steps"))
        ):
            continue  # "sync every N" says it
        parts.append(str(v) if isinstance(v, _Named) else _single(k, v))
    if not parts:
        return NONE_LABEL
    text = parts[0]
    for part in parts[1:]:  # a parenthesised part qualifies the one before it: "sync every 50 (epoch)"
        text += f" {part}" if part.startswith("(") else f", {part}"
    return text


class _Named(str):
    """A variant's own name standing for the key values it replaces."""


def label_runs(
    runs: pd.DataFrame, keys: Sequence[str], candidates: Sequence[str] = ()
) -> tuple[pd.Categorical, list[str]]:
    """One label per run for its values of ``keys``, told apart by ``candidates`` where needed.

    Runs that share a label but differ in some of ``candidates`` (keys the report does not
    facet or colour by) get the fewest of those keys added to *their* labels only: in a grid of
    loss types where GSPO is ``grpo`` with sequence-level ratios, ``grpo`` stays ``grpo`` and the
    other run becomes ``gspo`` (a named variant), while ``dapo`` is not touched. Keys of
    :data:`NAMED_VARIANTS` are tried first, then ``candidates`` in order.

    Args:
        runs: one row per run, with a column per key (missing values NaN/None), in the grid's
            order.
        keys: dotted keys (columns of ``runs``) that name the variants, in display order; empty
            gives every run the label "all" unless ``candidates`` split them.
        candidates: other keys that differ between runs.

    Returns:
        ``(labels, added)``: an ordered categorical of strings with one entry per row of
        ``runs``, and the candidate keys that were added to at least one label. Categories are
        ordered by the values, not by the label text: numbers numerically (``μ=10`` follows
        ``μ=2``), strings in the order the rows first list them, missing values first among
        several keys (a key a run leaves unset takes TRL's default) and last for a single key.
        Two different combinations never share a label; where the rules would give the same
        text, ``#2``, ``#3`` is appended.
    """
    keys = list(keys)
    named_keys = [k for named, _ in NAMED_VARIANTS for k in named if k in candidates and k not in keys]
    cands = list(dict.fromkeys([*named_keys, *(c for c in candidates if c not in keys)]))
    all_keys = [*keys, *cands]
    combos = (
        [canon(tuple(r)) for r in runs[all_keys].astype(object).itertuples(index=False)]
        if all_keys
        else [()] * len(runs)
    )
    unique = list(dict.fromkeys(combos))
    used_of, added = _tell_apart(unique, keys, cands, all_keys)
    unique.sort(key=_value_order(unique, missing_first=len(all_keys) > 1))
    texts: dict[tuple, str] = {}
    count: dict[str, int] = {}
    for c in unique:
        t = _combo_text(all_keys, c, used_of[c])
        count[t] = count.get(t, 0) + 1
        texts[c] = t if count[t] == 1 else f"{t} #{count[t]}"
    cats = list(dict.fromkeys(texts[c] for c in unique))
    return pd.Categorical([texts[c] for c in combos], categories=cats, ordered=True), added


def _combo_text(all_keys: Sequence[str], combo: tuple, used: Sequence[str]) -> str:
    """The label of ``combo`` (values of ``all_keys``) from its values of the keys ``used``."""
    if not used:
        return "all"
    return combo_label(list(used), [combo[all_keys.index(k)] for k in used])


def _tell_apart(
    unique: Sequence[tuple], keys: Sequence[str], cands: Sequence[str], all_keys: Sequence[str]
) -> tuple[dict[tuple, list[str]], list[str]]:
    """The keys each combination's label shows: ``keys``, plus, for combinations whose labels
    clash, the first of ``cands`` that differs among them, until no labels clash or no candidate
    helps.

    Returns:
        ``({combination: keys shown, in all_keys order}, candidates added to any label)``.
    """
    used_of = {c: list(keys) for c in unique}
    added: list[str] = []
    for _ in range(len(cands) + 1):
        groups: dict[str, list[tuple]] = {}
        for c in unique:
            groups.setdefault(_combo_text(all_keys, c, used_of[c]), []).append(c)
        clash = [g for g in groups.values() if len(g) > 1]
        if not clash:
            break
        progressed = False
        for group in clash:
            cand = _first_difference(group, cands, all_keys, used_of)
            if cand is None:
                continue
            for c in group:
                used_of[c] = [k for k in all_keys if k in used_of[c] or k == cand]
            if cand not in added:
                added.append(cand)
            progressed = True
        if not progressed:
            break
    return used_of, added


def _first_difference(
    group: Sequence[tuple], cands: Sequence[str], all_keys: Sequence[str], used_of: Mapping[tuple, list[str]]
) -> str | None:
    """The first of ``cands`` not yet shown by every combination of ``group`` whose values
    differ among them; None if none does."""
    for cand in cands:
        if all(cand in used_of[c] for c in group):
            continue
        if len({c[all_keys.index(cand)] for c in group}) > 1:
            return cand
    return None


def _value_order(unique: Sequence[tuple], *, missing_first: bool) -> Any:
    """Sort key of combinations by their values: numbers numerically, strings in the order
    ``unique`` first lists them, missing values first (``missing_first``) or last."""
    seen_at: dict[Any, int] = {}
    for c in unique:
        for v in c:
            if isinstance(v, str):
                seen_at.setdefault(v, len(seen_at))

    def order(v: Any) -> tuple[int, Any]:
        if v is None:
            return (-1, "") if missing_first else (3, "")
        return (1, seen_at[v]) if isinstance(v, str) else sort_key(v)

    return lambda c: tuple(order(v) for v in c)


def canon(combo: tuple) -> tuple:
    """Config values with missing ones as None and numpy scalars as Python ones (hashable, comparable)."""
    return tuple(None if is_missing(v) else (v.item() if hasattr(v, "item") else v) for v in combo)


def describe_combo(keys: Sequence[str], values: Sequence[Any]) -> str:
    """Full ``key=value`` text of a combination, for tables and captions (missing as ``(none)``)."""
    return ", ".join(
        f"{key_title(k)}={NONE_LABEL if is_missing(v) else format_value(v)}"
        for k, v in zip(keys, values, strict=True)
    )


def titles(keys: Sequence[str]) -> str:
    """Legend title for a set of keys: ``epsilon / epsilon_high``."""
    return " / ".join(key_title(k) for k in keys)
