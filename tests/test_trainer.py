"""The w_seq-recording trainer on a real tiny model: on/off-policy ratios, pooling, no extra forwards."""

import math

import pyarrow.parquet as pq
import pytest
from helpers import make_spec

from harness import layout
from harness.train.training import train


def metrics_of(tmp_path, spec):
    rdir = tmp_path / spec.run_id
    train(spec, rdir)
    return pq.read_table(rdir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()


@pytest.mark.parametrize(
    "trainer",
    [
        {},  # num_iterations = 1, GA = 1
        {"gradient_accumulation_steps": 4, "steps_per_generation": 2, "num_iterations": 2},
    ],
    ids=["mu1", "ga4-spg2-mu2"],
)
def test_on_policy_ratio_exactly_one(tmp_path, tiny_model, chain_sum_task, trainer):
    df = metrics_of(tmp_path, make_spec(tiny_model, chain_sum_task, **trainer))
    assert list(df["step"]) == [1, 2, 3, 4]
    for col in ("w_seq/min", "w_seq/max", "w_seq/mean", "w_seq/p05", "w_seq/p95", "s_seq/min", "s_seq/max"):
        assert (df[col] == 1.0).all(), col
    assert (df["log_w_seq/max"] == 0.0).all()
    for col in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert (df[col] == 0.0).all(), col
    ga = trainer.get("gradient_accumulation_steps", 1)
    # pooled over every micro-batch of the step, not averaged per micro-batch
    assert (df["w_seq/n"] + df["w_seq/n_masked"] == 8 * ga).all()


def test_off_policy_ratio_moves_and_clips(tmp_path, tiny_model, chain_sum_task):
    df = metrics_of(tmp_path, make_spec(tiny_model, chain_sum_task, num_iterations=2, epsilon=0.05))
    first_pass, second_pass = df[df["step"] % 2 == 1], df[df["step"] % 2 == 0]
    # the first pass over a generation batch is on-policy; the second uses the updated policy
    assert (first_pass["w_seq/max"] == 1.0).all() and (first_pass["w_seq/min"] == 1.0).all()
    assert (second_pass["w_seq/max"] > 1.0).any() or (second_pass["w_seq/min"] < 1.0).any()
    assert (second_pass["clip_ratio/region_mean"] > 0).any()
    assert (df["tokens/generated"][second_pass.index] == 0).all()
    assert (df["tokens/trained"] > 0).all()


@pytest.mark.parametrize(
    ("trainer", "off_policy", "reuse_index", "policy_lag"),
    [
        ({}, [0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]),
        # GA a multiple of steps_per_generation * num_iterations: TRL keeps no old log-probs
        (
            {"gradient_accumulation_steps": 4, "steps_per_generation": 2, "num_iterations": 2},
            [0, 0, 0, 0],
            [2, 2, 2, 2],
            [0, 0, 0, 0],
        ),
        ({"num_iterations": 2}, [0, 1, 0, 1], [1, 2, 1, 2], [0, 1, 0, 1]),
        ({"steps_per_generation": 2, "num_iterations": 2}, [0, 1, 1, 1], [1, 1, 2, 2], [0, 1, 2, 3]),
    ],
    ids=["mu1", "ga4-spg2-mu2", "mu2", "spg2-mu2"],
)
def test_off_policy_columns(
    tmp_path, tiny_model, chain_sum_task, trainer, off_policy, reuse_index, policy_lag
):
    """off_policy / reuse_index / policy_lag follow what TRL did, and off_policy 0 means ratios of 1."""
    df = metrics_of(tmp_path, make_spec(tiny_model, chain_sum_task, **trainer))
    assert list(df["step"]) == [1, 2, 3, 4]
    assert list(df[layout.OFF_POLICY]) == off_policy
    assert list(df[layout.REUSE_INDEX]) == reuse_index
    assert list(df[layout.POLICY_LAG]) == policy_lag
    on = df[df[layout.OFF_POLICY] == 0.0]
    assert len(on) > 0
    assert (on["w_seq/min"] == 1.0).all() and (on["w_seq/max"] == 1.0).all()


def test_samples_are_json_values(tmp_path, tiny_model, chain_sum_task):
    """samples.jsonl lines hold the prompt and completion as the JSON values TRL logged."""
    import json

    spec = make_spec(tiny_model, chain_sum_task, max_steps=2).with_settings(
        {"harness.samples_steps": 1, "harness.samples_n": 2, "task.template": "bare"}
    )
    rdir = tmp_path / spec.run_id
    train(spec, rdir)
    lines = [json.loads(line) for line in (rdir / layout.SAMPLES_FILE).read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 1, 2, 2]
    for line in lines:
        assert isinstance(line["prompt"], str) and isinstance(line["completion"], str)
        assert isinstance(line["advantage"], float)
        assert all(isinstance(v, int | float) for v in line["rewards"].values())


def test_plain_json_keeps_chat_messages():
    import json

    import numpy as np
    import torch

    from harness.train.recorder import plain_json

    prompt = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "1 + 2 = ?"}]
    back = json.loads(json.dumps(plain_json(prompt)))
    assert back == prompt and isinstance(back, list) and isinstance(back[0], dict)
    assert plain_json("plain") == "plain"
    assert plain_json({"a": (np.float32(0.5), torch.tensor(2)), 3: np.arange(2)}) == {
        "a": [0.5, 2],
        "3": [0, 1],
    }
    assert plain_json(object.__new__(object)).startswith("<object")


def test_same_run_same_metrics(tmp_path, tiny_model, chain_sum_task):
    spec = make_spec(tiny_model, chain_sum_task, num_iterations=2, max_steps=3)
    a = metrics_of(tmp_path / "a", spec)
    b = metrics_of(tmp_path / "b", spec)
    for col in ("loss", "reward", "w_seq/mean", "log_w_seq/mean", "entropy", "grad_norm"):
        assert a[col].equals(b[col]), col


def test_no_extra_forward_pass(tmp_path, tiny_model, chain_sum_task):
    """Model forwards per step are the same for TRL's trainer and the harness's."""
    from trl import GRPOTrainer

    from harness.losses import grpo_config_kwargs
    from harness.train.trainer import HarnessGRPOTrainer
    from harness.train.training import build_trainer
    from harness.trl_boundary import build_grpo_config

    spec = make_spec(
        tiny_model, chain_sum_task, max_steps=2, num_iterations=2, gradient_accumulation_steps=2
    ).with_settings({"task.train_size": 64, "harness.checkpoint_steps": 0})
    counts = {}
    for cls in (GRPOTrainer, HarnessGRPOTrainer):
        config = build_grpo_config(grpo_config_kwargs(spec, "cpu", str(tmp_path / cls.__name__)), "cpu")
        trainer, _, _ = build_trainer(spec, tiny_model, config, trainer_class=cls)
        n = {"calls": 0}
        trainer.model.register_forward_hook(lambda *a, n=n: n.__setitem__("calls", n["calls"] + 1))
        trainer.train()
        counts[cls.__name__] = n["calls"]
    assert counts["GRPOTrainer"] > 0
    assert counts["HarnessGRPOTrainer"] == counts["GRPOTrainer"]


def test_divergence_stops_and_marks(tmp_path, tiny_model, chain_sum_task, monkeypatch):
    """A non-finite loss stops the run with a DIVERGED marker naming the step, and no DONE."""
    from harness.train import training as training_mod

    spec = make_spec(tiny_model, chain_sum_task, max_steps=6)
    orig = training_mod.make_callback

    def poisoned(**kw):
        cb = orig(**kw)
        real = cb.on_log

        def on_log(args, state, control, logs=None, **k):
            if logs and "loss" in logs and state.global_step == 3:
                logs = {**logs, "loss": math.nan}
            return real(args, state, control, logs=logs, **k)

        cb.on_log = on_log
        return cb

    monkeypatch.setattr(training_mod, "make_callback", poisoned)
    rdir = tmp_path / spec.run_id
    with pytest.raises(training_mod.RunDiverged, match="step 3: loss is nan"):
        train(spec, rdir)
    assert not (rdir / layout.DONE_FILE).exists()
    import json

    marker = json.loads((rdir / layout.DIVERGED_FILE).read_text())
    assert marker["step"] == 3
    assert marker["metric"] == "loss"
    assert marker["value"] == "nan"
    df = pq.read_table(rdir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert df["step"].max() == 3


@pytest.mark.parametrize("sync", [True, False], ids=["hard-sync", "no-sync"])
def test_hard_ref_sync_zeroes_kl_on_next_generation(tmp_path, tiny_model, chain_sum_task, sync):
    """TRL syncs after an optimizer step and takes reference log-probs at generation time, so with
    alpha = 1 the first step that generates after a sync has KL ~ 0; without sync no later step does."""
    trainer = {"beta": 0.1, "max_steps": 6, "sync_ref_model": sync}
    if sync:
        trainer.update(ref_model_sync_steps=2, ref_model_mixup_alpha=1.0)
    df = metrics_of(tmp_path, make_spec(tiny_model, chain_sum_task, **trainer)).set_index("step")
    assert df.loc[1, "kl"] <= 1e-6  # the reference starts as the policy
    if sync:
        assert (df.loc[[3, 5], "kl"] <= 1e-6).all()
        assert (df.loc[[2, 4, 6], "kl"] > 1e-6).all()
    else:
        assert (df.loc[2:, "kl"] > 1e-6).all()


def test_beta_zero_has_no_kl_column(tmp_path, tiny_model, chain_sum_task):
    df = metrics_of(tmp_path, make_spec(tiny_model, chain_sum_task, max_steps=2))
    assert "kl" not in df.columns
