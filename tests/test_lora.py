"""LoRA through the grid's ``peft:`` section: planned, refused where TRL or peft would refuse at
start, trained as TRL trains it (adapter only, reference = base with adapters off), observed like a
full fine-tune (w_seq, off-policy flags), checkpointed and resumed."""

from __future__ import annotations

import json
import textwrap

import pyarrow.parquet as pq
import pytest

from harness import layout
from harness.settings.runs import RunSpec
from harness.train import checkpoints

pytest.importorskip("peft", reason="the peft extra: pip install 'grpo-harness[peft]'")

LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def _spec(tiny_model, task, peft=None, harness=None, **trainer) -> RunSpec:
    settings = {
        "seed": 0,
        "model": tiny_model,
        "task": {"name": task.name, "kwargs": dict(task.kwargs), "train_size": 256},
        "harness": {"device": "cpu", "eval_steps": 0, "samples_steps": 0, **(harness or {})},
        "trainer": {
            "max_steps": 4,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 6,
            "learning_rate": 1e-2,
            "loss_type": "grpo",
            "seed": 0,
            **trainer,
        },
    }
    if peft is not None:
        settings["peft"] = peft
    return RunSpec(grid="t", settings=settings)


def _metrics(run_dir):
    return pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()


def _plan_text(tmp_path, body: str):
    from harness.config.grid import expand
    from harness.config.spec import load_grid
    from harness.config.validate import validate_plan

    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent(body))
    plan = expand(load_grid(path))
    return plan, validate_plan(plan)


GRID = """\
name: lora
model: tiny
tiny: {sft_steps: 4, sft_examples: 64}
task: {name: chain_sum, kwargs: {min_terms: 2, max_terms: 2, max_digits: 1}, train_size: 64, eval_size: 16}
trainer: {max_steps: 2, per_device_train_batch_size: 8, num_generations: 4, max_completion_length: 6}
"""


def test_a_rank_axis_plans_and_a_grid_without_peft_keeps_its_run_ids(tmp_path):
    plan, validation = _plan_text(
        tmp_path, GRID + "peft: {lora_alpha: 16, lora_dropout: 0}\ngrid: {peft.r: [4, 16]}\n"
    )
    assert validation.ok, validation.format()
    assert [r.settings["peft"]["r"] for r in plan.runs] == [4, 16]
    assert plan.runs[0].settings["peft"]["lora_dropout"] == 0.0  # a float field: 0 and 0.0 are one run
    plain, _ = _plan_text(tmp_path, GRID)
    assert "peft" not in plain.runs[0].settings


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "trainer.beta: 0.1\ntrainer.sync_ref_model: true\npeft: {r: 4}\n",
            "peft: with trainer.sync_ref_model: true",
        ),
        ("peft: {rank: 4}\n", "LoraConfig has no field 'rank'. Valid: r, target_modules"),
        ("peft: {task_type: SEQ_CLS}\n", "peft.task_type is set by the harness"),
        ("peft: {r: four}\n", "peft.r = 'four' has type str; expected int"),
        ("peft: {target_modules: [q_proj, attn]}\n", "has no module named 'attn'"),
        ("peft: {r: 4, use_dora: true, use_rslora: true, lora_bias: true}\n", "peft: LoraConfig refuses"),
    ],
    ids=["sync", "unknown-key", "owned", "type", "module", "peft-check"],
)
def test_bad_peft_sections_are_refused_at_plan_with_the_fix(tmp_path, extra, expected):
    from harness.settings.schema import SpecError

    body = GRID + extra.replace("trainer.beta: 0.1\ntrainer.sync_ref_model: true\n", "")
    if "sync_ref_model" in extra:
        body = body.replace(
            "max_completion_length: 6}", "max_completion_length: 6, beta: 0.1, sync_ref_model: true}"
        )
    try:
        _, validation = _plan_text(tmp_path, body)
        text = validation.format()
        assert not validation.ok
    except SpecError as e:
        text = str(e)
    assert expected in text, text


def test_lora_trains_the_adapter_against_the_base_model(tmp_path, tiny_model, chain_sum_task):
    """Only the adapter trains; with beta > 0 the reference is the base model with the adapters off
    (KL 0 at the first step, where policy = base since LoRA's B starts at zero, then > 0); w_seq and
    the off-policy flags behave as in a full fine-tune of the same settings."""
    from harness.losses import grpo_config_kwargs
    from harness.train.training import build_trainer, train
    from harness.trl_boundary import build_grpo_config

    trainer = {"num_iterations": 2, "beta": 0.5}
    spec = _spec(tiny_model, chain_sum_task, LORA, **trainer)
    config = build_grpo_config(grpo_config_kwargs(spec, "cpu", str(tmp_path / "probe")), "cpu")
    built, _, _ = build_trainer(spec, tiny_model, config)
    trainable = [n for n, p in built.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert built.ref_model is None  # TRL disables the adapters for the reference pass
    del built

    lora = _metrics(_run(tmp_path / "lora", spec, train))
    full = _metrics(_run(tmp_path / "full", _spec(tiny_model, chain_sum_task, **trainer), train))
    assert lora["kl"].iloc[0] == 0.0 and (lora["kl"].iloc[1:] > 0).any()
    for col in (layout.OFF_POLICY, layout.REUSE_INDEX, layout.POLICY_LAG, "w_seq/n"):
        assert list(lora[col]) == list(full[col]), col
    second = lora[lora[layout.OFF_POLICY] == 1.0]
    assert len(second) == 2
    assert ((second["w_seq/max"] > 1.0) | (second["w_seq/min"] < 1.0)).all()


def _run(run_dir, spec, train):
    train(spec, run_dir)
    return run_dir


def test_a_lora_checkpoint_holds_the_adapter_and_resumes(tmp_path, tiny_model, chain_sum_task):
    """Stopped at step 2 and resumed, a LoRA run records every step once, with the same metrics as
    the uninterrupted run; its checkpoints hold the adapter, not the whole model."""
    from harness.train.training import train

    spec = _spec(tiny_model, chain_sum_task, LORA, {"checkpoint_steps": 2}, num_iterations=2, beta=0.1)
    train(spec, tmp_path / "whole")
    run_dir = tmp_path / "resumed"
    calls = []
    assert train(spec, run_dir, stop_requested=lambda: calls.append(1) or len(calls) >= 2)["steps"] == 2
    ckpt = run_dir / layout.CHECKPOINTS_DIR / "checkpoint-2"
    assert (ckpt / "adapter_model.safetensors").exists() and not (ckpt / "model.safetensors").exists()
    assert json.loads((ckpt / "adapter_config.json").read_text())["r"] == LORA["r"]
    assert checkpoints.problem(ckpt) is None
    assert train(spec, run_dir)["resumed_from"] == 2
    a, b = _metrics(tmp_path / "whole"), _metrics(run_dir)
    assert list(b["step"]) == [1, 2, 3, 4]
    for col in ("loss", "reward", "kl", "w_seq/mean"):
        assert a[col].equals(b[col]), (col, a[col].tolist(), b[col].tolist())


@pytest.mark.parametrize(
    "peft, said",
    [
        ({"r": 0}, "peft.r = 0: the LoRA rank must be a positive integer"),
        ({"r": 4, "lora_dropout": 2.0}, "peft.lora_dropout = 2.0: a dropout probability is in [0, 1)"),
        ({"r": 4, "target_modules": "nonexistent"}, "it matches no module"),
        ({"r": 4, "target_modules": "q_proj"}, "it matches no module"),  # a string is a full-name regex
    ],
)
def test_what_peft_refuses_only_when_it_wraps_the_model_is_refused_at_plan(peft, said):
    from harness.config import lora

    (problem,) = lora.problems(peft, {}, "tiny", True)
    assert said in problem


def test_a_regex_over_full_names_is_accepted():
    from harness.config import lora

    assert lora.problems({"r": 4, "target_modules": r".*\.(q_proj|v_proj)"}, {}, "tiny", True) == []
