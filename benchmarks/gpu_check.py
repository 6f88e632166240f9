"""The Python half of ``benchmarks/gpu_check.sh``: the random Qwen2.5-0.5B-shaped model and the tables.

``python benchmarks/gpu_check.py model --size qwen2.5-0.5b --out DIR --cache DIR`` builds a
``Qwen2ForCausalLM`` with Qwen2.5-0.5B's shapes (hidden 896, 24 layers, 14 attention heads, 2 KV heads,
intermediate 4864, vocabulary 151936, tied embeddings, rope theta 1e6, 32768 positions) and random
weights, with the tokenizer of the harness's ``tiny-chat`` model (``harness.models.names.resolve_model``), and
saves both (bf16 safetensors) with ``save_pretrained``. ``--size small`` is the same family at a few layers
and a small width, for the CPU path.

The tokenizer holds a few hundred tokens; the other rows of the embedding exist only so that the
shapes (and so the cost of the LM head and of TRL's log-softmax) are Qwen's. A randomly initialised
model would put almost all its probability on those rows, which decode to nothing. So every row gets
``+c`` (rows of the tokenizer) or ``-c`` (the others) in dimension 0, and the final norm's weight in
dimension 0 is set so that those rows' logits sit a fixed margin apart (the embedding is tied: the same
rows are the LM head). The model then samples the tokenizer's tokens, nearly uniformly; the build checks
that at least :data:`MIN_IN_VOCAB_MASS` of the probability is on them at every position of a prompt.

``python benchmarks/gpu_check.py tables --results GRID_DIR --bench DIR --out DIR`` reads the runs of the
check's grid (metrics parquet, config and provenance) and writes ``training.{md,csv}`` (per loss type:
s/step, tokens/s, peak memory, w_seq at the off-policy pass), ``wseq.{md,csv}`` (per loss type and
step) and ``vespo.{md,csv}`` (the loss benchmark, with the speed-up reported in TRL pull request #5199
beside it) into ``--out``, and ``index.md`` naming the device and versions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# The shapes of Qwen2.5-0.5B(-Instruct)'s config.json; "small" keeps the family at CPU cost.
SIZES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
    },
    "small": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 4096,
        "max_position_embeddings": 2048,
    },
}
ROPE_THETA = 1e6
# The task of the check's grid (ablations/smoke.yaml's paper profile with 1-digit terms, bare template):
# the tokenizer is trained on its texts.
TASK_KWARGS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
# Dimension-0 entry of every embedding row (+ tokenizer rows, - the others) and the logit margin (nats)
# between the two groups that the final norm's weight is set to; margin 30 leaves about 1e-8 of the
# probability on Qwen's 151,547 rows that the tokenizer lacks.
ROW_OFFSET = 30.0
LOGIT_MARGIN = 30.0
MIN_IN_VOCAB_MASS = 0.999
# TRL pull request #5199: TRL's get_gamma_weights 1.19x to 1.25x faster per call than the official
# implementation, on a GPU, with the token-level IS ratio, over the 8 shapes of `bench vespo --full`.
REPORTED_SPEEDUP = (1.19, 1.25)


# --------------------------------------------------------------------------------------------------
# The model


def chat_tokenizer(cache_dir: Path, model_max_length: int) -> Any:
    """The tokenizer of the harness's ``tiny-chat`` model for the check's task, built into ``cache_dir``.

    Only the tokenizer is used, so the warm start is one SFT step (the tokenizer does not depend on it).

    Returns:
        A ``PreTrainedTokenizerFast`` with ``model_max_length`` set.
    """
    from transformers import AutoTokenizer

    from harness.models.names import resolve_model
    from harness.settings.schema import TaskSpec, TinyChatModelSpec

    task = TaskSpec(name="chain_sum", kwargs=TASK_KWARGS, template="chat")
    path = resolve_model(
        "tiny-chat", task=task, cache_dir=cache_dir, tiny_spec=TinyChatModelSpec(sft_steps=1)
    )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.model_max_length = model_max_length
    return tokenizer


def random_model(size: str, tokenizer: Any, seed: int, device: str = "cpu") -> Any:
    """A randomly initialised ``Qwen2ForCausalLM`` of ``SIZES[size]``, float32, initialised on ``device``
    (``"cuda"`` draws the 494M weights of the full size in a second; the seed then gives other weights).

    Raises:
        KeyError: an unknown size.
        ValueError: the tokenizer has more tokens than the size's vocabulary.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shapes = SIZES[size]
    if len(tokenizer) > shapes["vocab_size"]:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens, more than vocab_size {shapes['vocab_size']}"
        )
    config = Qwen2Config(
        **shapes,
        tie_word_embeddings=True,
        rope_theta=ROPE_THETA,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
        setattr(model.generation_config, key, getattr(tokenizer, key))
    return model


def sample_prompts(tokenizer: Any, count: int = 4, device: str = "cpu") -> Any:
    """``count`` bare prompts of the check's task, each followed by 32 random tokenizer tokens, as a
    (count, T) id tensor (left-padded with the pad id; T in tokens)."""
    import torch

    from harness.models.tasks import bare_prompt, generate_entries
    from harness.settings.schema import TaskSpec

    _, entries = generate_entries(TaskSpec(name="chain_sum", kwargs=TASK_KWARGS), 0, count)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for entry in entries:
        ids = tokenizer(bare_prompt(entry), add_special_tokens=False)["input_ids"]
        rows.append(ids + torch.randint(4, len(tokenizer), (32,), generator=gen).tolist())
    width = max(len(r) for r in rows)
    return torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows], device=device)


def _group_gaps(model: Any, ids: Any) -> tuple[float, float]:
    """Smallest and largest (over the positions of ``ids``, (B, T)) logit gap, in nats, that dimension 0
    makes between a row of the tokenizer and one of the others (both hold ``ROW_OFFSET`` there, with
    opposite signs)."""
    import torch

    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state  # (B, T, H), after the final norm
    gap = 2 * ROW_OFFSET * hidden[..., 0]
    return float(gap.min()), float(gap.max())


def in_vocab_mass(model: Any, ids: Any, n_real: int) -> float:
    """Smallest probability (over positions of ``ids``, (B, T)) that the model puts on the tokenizer's ids."""
    import torch

    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids).logits.float(), dim=-1)
    return float(probs[..., :n_real].sum(-1).min())


def steer_to_tokenizer(model: Any, ids: Any, n_real: int) -> dict[str, float]:
    """Make the random model sample only the tokenizer's ``n_real`` ids (see the module docstring).

    Sets dimension 0 of every embedding row to ``+ROW_OFFSET`` (ids < n_real) or ``-ROW_OFFSET``, then the
    final norm's dimension-0 weight so that the smallest gap over the positions of ``ids`` is
    :data:`LOGIT_MARGIN` nats.

    Returns:
        ``{"norm_weight_0", "gap_min", "gap_max", "in_vocab_mass"}`` (gaps in nats, mass a probability).

    Raises:
        RuntimeError: the hidden state's dimension 0 is not positive everywhere, or less than
            :data:`MIN_IN_VOCAB_MASS` of the probability is on the tokenizer's ids after the change.
    """
    import torch

    with torch.no_grad():
        rows = model.get_input_embeddings().weight
        rows[:n_real, 0] = ROW_OFFSET
        rows[n_real:, 0] = -ROW_OFFSET
        model.model.norm.weight[0] = 1.0
        low, _ = _group_gaps(model, ids)
        if low <= 0:
            raise RuntimeError(f"dimension 0 of the last hidden state is not positive everywhere ({low:.3g})")
        model.model.norm.weight[0] = LOGIT_MARGIN / low
        low, high = _group_gaps(model, ids)
    mass = in_vocab_mass(model, ids, n_real)
    if mass < MIN_IN_VOCAB_MASS:
        raise RuntimeError(f"only {mass:.6f} of the probability is on the tokenizer's {n_real} ids")
    return {
        "norm_weight_0": float(model.model.norm.weight[0]),
        "gap_min": low,
        "gap_max": high,
        "in_vocab_mass": mass,
    }


def build(size: str, out: Path, cache_dir: Path, seed: int = 0, device: str = "cpu") -> dict[str, Any]:
    """Build the check's model on ``device`` into ``out`` (bf16 safetensors, tokenizer, ``model_info.json``).

    Returns:
        The build record also written to ``out/model_info.json``: size, shapes, parameters, tokenizer
        size, the steering numbers of :func:`steer_to_tokenizer`, build seconds.
    """
    import torch

    start = time.perf_counter()
    tokenizer = chat_tokenizer(cache_dir, SIZES[size]["max_position_embeddings"])
    model = random_model(size, tokenizer, seed, device)
    steering = steer_to_tokenizer(model, sample_prompts(tokenizer, device=device), len(tokenizer))
    model = model.to(torch.bfloat16).cpu()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "size": size,
        "shapes": SIZES[size],
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": True,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_tokens": len(tokenizer),
        "seed": seed,
        "initialised_on": device,
        **steering,
        "build_seconds": round(time.perf_counter() - start, 2),
    }
    (out / "model_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


# --------------------------------------------------------------------------------------------------
# The tables

# (column, header, format) of the per-step w_seq table.
WSEQ_COLUMNS = (
    ("step", "step", "{:.0f}"),
    ("reuse_index", "pass", "{:.0f}"),
    ("policy_lag", "lag", "{:.0f}"),
    ("time/step_s", "s/step", "{:.2f}"),
    ("tokens/generated", "generated", "{:.0f}"),
    ("reward", "reward", "{:.4f}"),
    ("w_seq/mean", "w_seq mean", "{:.6f}"),
    ("w_seq/std", "std", "{:.2e}"),
    ("w_seq/min", "min", "{:.6f}"),
    ("w_seq/p05", "p05", "{:.6f}"),
    ("w_seq/p95", "p95", "{:.6f}"),
    ("w_seq/max", "max", "{:.6f}"),
)


def load_runs(grid_dir: Path) -> list[dict[str, Any]]:
    """Every run of the check's grid, in the grid's order: ``{"loss_type", "run_id", "config", "provenance",
    "metrics"}`` with the metrics as a pandas frame sorted by step (a later part wins on a repeated step).

    Raises:
        FileNotFoundError: the grid has no run with metrics.
    """
    import pandas as pd

    from harness import layout

    order = (layout.read_grid(grid_dir) or {}).get("run_ids") or []
    found = sorted(
        (grid_dir / layout.RUNS_DIR).glob("*"),
        key=lambda p: (p.name not in order, order.index(p.name) if p.name in order else 0, p.name),
    )
    runs = []
    for run_dir in found:
        paths = layout.metric_paths(run_dir)
        if not paths:
            continue
        frame = pd.concat([pd.read_parquet(p) for p in paths]).drop_duplicates(layout.STEP, keep="last")
        record = layout.read_json_object(run_dir / layout.CONFIG_FILE) or {}
        settings = record.get("config") or {}
        loss_type = (record.get("varying") or {}).get("loss_type") or settings.get("trainer", {}).get(
            "loss_type"
        )
        runs.append(
            {
                "loss_type": loss_type or "grpo",
                "run_id": run_dir.name,
                "config": settings,
                "provenance": layout.read_json_object(run_dir / layout.PROVENANCE_FILE) or {},
                "metrics": frame.sort_values(layout.STEP).reset_index(drop=True),
            }
        )
    if not runs:
        raise FileNotFoundError(f"no run with metrics under {grid_dir / layout.RUNS_DIR}")
    return runs


def _column(frame: Any, name: str) -> Any:
    """``frame[name]`` as floats, or an all-NaN column where the runs did not log it."""
    import pandas as pd

    if name in frame:
        return pd.to_numeric(frame[name], errors="coerce")
    return pd.Series(math.nan, index=frame.index)


def off_policy_steps(frame: Any) -> Any:
    """The rows of steps whose loss reused a generation batch (pass 2 or later: ``reuse_index > 1``)."""
    return frame[_column(frame, "reuse_index") > 1]


def wseq_moves(frame: Any) -> bool:
    """Whether w_seq differs from exactly 1 on some off-policy step (its min or max over completions)."""
    reused = off_policy_steps(frame)
    lows, highs = _column(reused, "w_seq/min"), _column(reused, "w_seq/max")
    return bool(((lows != 1.0) & lows.notna()).any() or ((highs != 1.0) & highs.notna()).any())


def training_row(run: Mapping[str, Any]) -> dict[str, Any]:
    """One loss type's timing and memory summary (s, tokens/s, MiB) from its per-step metrics.

    ``s_per_step`` is the median wall time of an optimizer step, generation included, over all steps;
    ``first_step_s`` is step 1 alone (CUDA start-up and allocator warm-up land there); the token rates
    divide all completion tokens generated (or entering the loss) by all steps' wall time.
    """
    frame = run["metrics"]
    step_s = _column(frame, "time/step_s")
    total_s = float(step_s.sum())
    reused = off_policy_steps(frame)
    trainer = run["config"].get("trainer", {})
    return {
        "loss_type": run["loss_type"],
        "steps": len(frame),
        "s_per_step": round(float(step_s.median()), 4),
        "s_per_step_after_first": round(float(step_s.iloc[1:].mean()), 4) if len(frame) > 1 else math.nan,
        "first_step_s": round(float(step_s.iloc[0]), 4),
        "generated_tokens_per_s": round(float(_column(frame, "tokens/generated").sum()) / total_s, 1),
        "trained_tokens_per_s": round(float(_column(frame, "tokens/trained").sum()) / total_s, 1),
        "peak_memory_mib": round(float(_column(frame, "memory/peak_mb").max()), 1),
        "mean_completion_tokens": round(float(_column(frame, "completions/mean_length").mean()), 1),
        "reward_mean": round(float(_column(frame, "reward").mean()), 5),
        "off_policy_steps": len(reused),
        "wseq_offpolicy_min": float(_column(reused, "w_seq/min").min()),
        "wseq_offpolicy_max": float(_column(reused, "w_seq/max").max()),
        "wseq_offpolicy_std_mean": float(_column(reused, "w_seq/std").mean()),
        "wseq_moves": wseq_moves(frame),
        "per_device_train_batch_size": trainer.get("per_device_train_batch_size"),
        "gradient_accumulation_steps": trainer.get("gradient_accumulation_steps", 1),
        "num_generations": trainer.get("num_generations"),
        "max_completion_length": trainer.get("max_completion_length"),
        "num_iterations": trainer.get("num_iterations"),
        "bf16": trainer.get("bf16", False),
        "run_id": run["run_id"],
    }


def wseq_rows(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per step of one run: :data:`WSEQ_COLUMNS` (NaN where not logged), with the loss type first."""
    frame = run["metrics"]
    columns = {name: _column(frame, name) for name, _, _ in WSEQ_COLUMNS}
    return [
        {"loss_type": run["loss_type"], **{name: float(values.iloc[i]) for name, values in columns.items()}}
        for i in range(len(frame))
    ]


def versions(runs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Device and library versions from the first run's provenance (the same process image ran all)."""
    prov = runs[0]["provenance"]
    keys = ("device", "cuda_device", "python", "torch", "transformers", "trl", "accelerate", "reasoning_gym")
    out = {key: str(prov.get(key) or "") for key in keys}
    if not out["cuda_device"]:
        from harness.bench.common import cpu_model

        out["machine"] = cpu_model()
    else:
        out["machine"] = out["cuda_device"]
    out["git_commit"] = str(prov.get("git_commit") or "")[:12]
    return out


def _fmt(value: Any, pattern: str = "{}") -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    return pattern.format(value)


def header(title: str, info: Mapping[str, str]) -> list[str]:
    """Markdown title and the device and versions lines."""
    return [
        f"# {title}",
        "",
        f"- device: {info['device']} ({info['machine']})",
        f"- Python {info['python']}, torch {info['torch']}, transformers {info['transformers']}, trl {info['trl']}, "
        f"accelerate {info['accelerate']}, reasoning-gym {info['reasoning_gym']}; harness commit {info['git_commit']}",
        "",
    ]


def markdown(header_row: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A pipe (GitHub) markdown table of text cells, printed as given."""
    from tabulate import tabulate

    return tabulate(rows, headers=list(header_row), tablefmt="pipe", disable_numparse=True)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], info: Mapping[str, str]) -> None:
    """``rows`` (same keys each) with the device and version columns of ``info`` appended, as CSV."""
    import csv

    full = [{**row, **info} for row in rows]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(full[0]) if full else list(info))
        writer.writeheader()
        writer.writerows(full)


def render_training(
    rows: Sequence[Mapping[str, Any]], info: Mapping[str, str], model: Mapping[str, Any]
) -> str:
    """``training.md``: settings, then one line per loss type (s/step, tokens/s, peak memory, w_seq)."""
    first = rows[0]
    shapes = model.get("shapes", {})
    lines = header(
        f"GRPO steps of a random Qwen2 model ({model.get('size', '?')}) through grpo-harness run", info
    )
    lines += [
        f"- model: Qwen2ForCausalLM, random weights (seed {model.get('seed')}), {model.get('parameters', 0) / 1e6:.1f}M "
        f"parameters: hidden {shapes.get('hidden_size')}, {shapes.get('num_hidden_layers')} layers, "
        f"{shapes.get('num_attention_heads')} heads / {shapes.get('num_key_value_heads')} KV heads, intermediate "
        f"{shapes.get('intermediate_size')}, vocabulary {shapes.get('vocab_size')} (tied), tokenizer: tiny-chat's "
        f"{model.get('tokenizer_tokens')} tokens",
        f"- batch: {first['per_device_train_batch_size']} completions per device x gradient accumulation "
        f"{first['gradient_accumulation_steps']}, {first['num_generations']} per prompt, up to "
        f"{first['max_completion_length']} tokens, num_iterations (mu) {first['num_iterations']}, bf16 {first['bf16']}; "
        "HF generate (no vLLM)",
        "- s/step: median wall time of an optimizer step, generation included; first step apart (start-up); "
        "tokens/s: completion tokens generated (or entering the loss) over all steps' wall time; "
        "peak memory: torch.cuda.max_memory_allocated (CPU: resident set) in MiB",
        "",
    ]
    table = [
        [
            str(r["loss_type"]),
            str(r["steps"]),
            _fmt(r["s_per_step"], "{:.3f}"),
            _fmt(r["first_step_s"], "{:.2f}"),
            _fmt(r["generated_tokens_per_s"], "{:.0f}"),
            _fmt(r["trained_tokens_per_s"], "{:.0f}"),
            _fmt(r["peak_memory_mib"], "{:.0f}"),
            _fmt(r["mean_completion_tokens"], "{:.1f}"),
            f"{_fmt(r['wseq_offpolicy_min'], '{:.6f}')} - {_fmt(r['wseq_offpolicy_max'], '{:.6f}')}",
            "yes" if r["wseq_moves"] else "NO",
        ]
        for r in rows
    ]
    head = ["loss_type", "steps", "s/step", "step 1 (s)", "generated tok/s", "trained tok/s", "peak MiB"]
    head += ["mean length", "w_seq range, pass 2", "w_seq moves"]
    return "\n".join([*lines, markdown(head, table), ""])


def render_wseq(rows: Sequence[Mapping[str, Any]], info: Mapping[str, str]) -> str:
    """``wseq.md``: per loss type and step, the pass over the generation batch and w_seq's statistics."""
    lines = header("w_seq per optimizer step (num_iterations = 2: pass 2 reuses the batch off-policy)", info)
    lines += [
        "w_seq = exp(sum_t mask_t (log pi_theta - log pi_old)) per completion; on pass 1 it is exactly 1, "
        "on pass 2 the policy has taken one optimizer step since the batch was generated.",
        "",
    ]
    head = ["loss_type", *(title for _, title, _ in WSEQ_COLUMNS)]
    table = [[str(r["loss_type"]), *(_fmt(r[name], fmt) for name, _, fmt in WSEQ_COLUMNS)] for r in rows]
    return "\n".join([*lines, markdown(head, table), ""])


def vespo_beside(bench_dir: Path) -> tuple[str, list[dict[str, Any]]]:
    """The ``bench vespo`` report with the measured TRL speed-up beside the one reported in TRL PR #5199.

    Args:
        bench_dir: the folder ``bench vespo`` wrote ``vespo.md`` and ``vespo.csv`` into.

    Returns:
        ``(markdown, csv rows)``; the rows are the bench's with ``reported_low`` and ``reported_high``.

    Raises:
        FileNotFoundError: the bench's files are missing.
    """
    import csv

    report = (bench_dir / "vespo.md").read_text().rstrip()
    with (bench_dir / "vespo.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    low, high = REPORTED_SPEEDUP
    table = [
        [
            f"{r['B']} x {r['T']}",
            "with" if r["is_ratio"] == "1" else "without",
            f"{float(r['trl_ms']):.4f}",
            f"{float(r['reference_ms']):.4f}",
            f"{float(r['trl_speedup']):.2f}x [{float(r['trl_speedup_q1']):.2f}, {float(r['trl_speedup_q3']):.2f}]",
            f"{low:.2f}-{high:.2f}x" if r["is_ratio"] == "1" else "-",
        ]
        for r in rows
    ]
    head = ["B x T", "IS ratio", "TRL (ms)", "reference (ms)", "TRL speed-up [q1, q3]", "reported (PR #5199)"]
    beside = [
        "",
        "## Beside the reported speed-up",
        "",
        "TRL pull request #5199 reported TRL's `get_gamma_weights` 1.19x to 1.25x faster per call than the "
        "official implementation on a GPU, with the token-level IS ratio, over these shapes. Speed-up: median "
        "over measurement cycles of time(reference) / time(TRL), quartiles in brackets.",
        "",
        markdown(head, table),
        "",
    ]
    out_rows = [{**r, "reported_low": low, "reported_high": high} for r in rows]
    return "\n".join([report, *beside]), out_rows


def write_tables(grid_dir: Path, bench_dir: Path | None, model_dir: Path, out: Path) -> list[dict[str, Any]]:
    """Write ``training``, ``wseq`` and (when ``bench_dir`` is given) ``vespo`` as ``.md`` and ``.csv``
    into ``out``, and ``index.md``; print the markdown.

    Returns:
        The training rows (one per loss type).

    Raises:
        FileNotFoundError: no run with metrics, or the bench's files are missing.
    """
    runs = load_runs(grid_dir)
    info = versions(runs)
    model = (
        json.loads((model_dir / "model_info.json").read_text())
        if (model_dir / "model_info.json").is_file()
        else {}
    )
    out.mkdir(parents=True, exist_ok=True)
    training = [training_row(run) for run in runs]
    per_step = [row for run in runs for row in wseq_rows(run)]
    written = {
        "training": (render_training(training, info, model), training, info),
        "wseq": (render_wseq(per_step, info), per_step, info),
    }
    if bench_dir is not None:
        report, rows = vespo_beside(bench_dir)
        written["vespo"] = (report, rows, {})
    for stem, (report, rows, extra) in written.items():
        (out / f"{stem}.md").write_text(report + "\n")
        write_csv(out / f"{stem}.csv", rows, extra)
        print(report, flush=True)
    index = header(f"GPU check on {info['machine']}", info)
    index += [f"- [{stem}.md]({stem}.md), [{stem}.csv]({stem}.csv)" for stem in written]
    index += [f"- written {time.strftime('%Y-%m-%d %H:%M:%S %z')} by benchmarks/gpu_check.sh", ""]
    (out / "index.md").write_text("\n".join(index))
    return training


def check_tables(out: Path) -> list[str]:
    """What is wrong with the tables in ``out`` (an empty list when nothing): every file present, every
    run with steps and positive s/step, and w_seq away from exactly 1 on an off-policy step of each."""
    import csv

    problems = [f"{name} is missing" for name in ("training.csv", "wseq.csv") if not (out / name).is_file()]
    if problems:
        return problems
    with (out / "training.csv").open() as handle:
        for row in csv.DictReader(handle):
            name = row["loss_type"]
            if not float(row["s_per_step"]) > 0:
                problems.append(f"{name}: s/step is {row['s_per_step']}")
            if row["wseq_moves"] != "True":
                problems.append(f"{name}: w_seq is exactly 1 on every off-policy step")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``model`` or ``tables`` (see the module docstring). Returns the exit status (1: a table check failed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    model = commands.add_parser("model", help="build the random model with the tiny-chat tokenizer")
    model.add_argument("--size", choices=sorted(SIZES), default="qwen2.5-0.5b")
    model.add_argument("--out", type=Path, required=True)
    model.add_argument("--cache", type=Path, required=True, help="where the tiny-chat tokenizer is built")
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to draw the weights")
    tables = commands.add_parser("tables", help="write the tables of a finished check")
    tables.add_argument("--results", type=Path, required=True, help="the check grid's results folder")
    tables.add_argument("--bench", type=Path, default=None, help="the folder bench vespo wrote into")
    tables.add_argument("--model", type=Path, required=True, help="the model folder (model_info.json)")
    tables.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "model":
        print(
            json.dumps(build(args.size, args.out, args.cache, args.seed, args.device), indent=2), flush=True
        )
        return 0
    write_tables(args.results, args.bench, args.model, args.out)
    problems = check_tables(args.out)
    for problem in problems:
        print(f"CHECK FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
