"""Dynamic sampling (the grid's ``dynamic_sampling`` section; harness.train.dynamic_sampling and the
trainer's generation wrapper).

Fast: the filter against verl's rule on the same rewards, the stream of further prompts, the rows a
batch trains on. Slow: runs on the tiny model, checked against their own ``dynamic_sampling.jsonl``
(every kept group unequal, every dropped group equal, counts that add up, TRL's trained batch the
kept groups), with reuse, accumulation and a loss plugin; a stopped and resumed run equals the
uninterrupted one step by step; validation of the section.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import make_spec

from harness import layout
from harness.train import dynamic_sampling as ds


def verl_kept(values: np.ndarray, n: int) -> np.ndarray:
    """verl's rule (volcengine/verl, recipe/dapo/dapo_ray_trainer.py, ``filter_groups``): a prompt is
    kept when ``np.std`` of its metric values is > 0 or it has a single value."""
    groups = values.reshape(-1, n)
    return np.array([np.std(g) > 0 or len(g) == 1 for g in groups])


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_the_filter_keeps_the_groups_verl_keeps(n):
    rng = np.random.default_rng(n)
    for p_correct in (0.05, 0.5, 0.95):
        binary = (rng.random(64 * n) < p_correct).astype(float)  # correctness: 0 or 1
        assert (ds.kept_groups(binary, n) == verl_kept(binary, n)).all()
        # the weighted sum of correctness and a format reward: 0, 0.5, 1, 1.5
        shaped = binary + 0.5 * (rng.random(64 * n) < 0.7)
        assert (ds.kept_groups(shaped, n) == verl_kept(shaped, n)).all()
    # DAPO's soft overlong punishment: a negative term falling in steps of 1/16
    lengths = rng.integers(40, 70, 64 * n)
    punished = np.clip((48 - lengths) / 16, -1, 0) + (rng.random(64 * n) < 0.5)
    assert (ds.kept_groups(punished, n) == verl_kept(punished, n)).all()


def test_the_filter_compares_values_exactly_where_np_std_rounds():
    # three equal rewards of 0.1: np.std rounds to 1.4e-17 > 0, so verl keeps a group with no signal
    equal = np.full(3, 0.1)
    assert verl_kept(equal, 3).tolist() == [True]
    assert ds.kept_groups(equal, 3).tolist() == [False]
    # unscorable completions (NaN) take no part; fewer than two values left is no signal
    values = np.array([np.nan, 1.0, 0.0, 0.0, np.nan, np.nan, 1.0, np.nan, np.nan, 1.0, 1.0, np.nan])
    assert ds.kept_groups(values, 4).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="groups of 4"):
        ds.kept_groups(np.zeros(6), 4)


def test_further_prompts_are_a_function_of_the_step_and_round():
    a = ds.further_prompts(seed=3, step=7, micro=0, round_=1, n_prompts=8, n_train=100)
    assert (a == ds.further_prompts(3, 7, 0, 1, 8, 100)).all()  # a resume draws the same
    assert len(set(a.tolist())) == 8 and a.min() >= 0 and a.max() < 100  # no prompt twice in a batch
    others = [ds.further_prompts(3, 7, 0, 2, 8, 100), ds.further_prompts(3, 8, 0, 1, 8, 100)]
    others += [ds.further_prompts(4, 7, 0, 1, 8, 100), ds.further_prompts(3, 7, 1, 1, 8, 100)]
    assert all((a != o).any() for o in others)
    small = ds.further_prompts(0, 0, 0, 1, n_prompts=10, n_train=4)  # more prompts than the split
    assert small.size == 10 and set(small.tolist()) <= {0, 1, 2, 3}


def test_rows_to_train_full_short_and_filled():
    g = 4
    keep = np.array([True, False, True, True, False, True, True])  # 5 of 7 groups kept
    full = ds.rows_to_train(keep, g, target_rows=16, unit=2)  # 4 groups wanted
    assert full.rows.tolist() == [*range(0, 4), *range(8, 16), *range(20, 24)]
    assert (full.groups_kept, full.short, full.filled) == (5, False, 0)
    short = ds.rows_to_train(keep[:4], g, target_rows=16, unit=8)  # 3 kept; lcm(4, 8) = 8 rows
    assert short.rows.tolist() == [*range(0, 4), *range(8, 12)] and short.short and not short.filled
    none = ds.rows_to_train(np.array([False, False, True, False]), g, target_rows=16, unit=8)
    assert none.rows.tolist() == [*range(8, 12), *range(0, 4)] and none.filled == 4  # a dropped group fills


# --------------------------------------------------------------------------------------------- runs

DS = {"dynamic_sampling.enable": True, "dynamic_sampling.max_gen_batches": 3}


def _groups(run_dir: Path) -> pd.DataFrame:
    lines = (run_dir / layout.DS_LOG_FILE).read_text().splitlines()
    return pd.DataFrame([json.loads(line) for line in lines])


def _metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / layout.METRICS_DIR).sort_values("step").reset_index(drop=True)


@pytest.fixture(scope="module")
def reused_run(tiny_model, chain_sum_task, tmp_path_factory):
    """6 steps with dynamic sampling, each generation batch split in 2 (steps_per_generation) and
    used twice (num_iterations), 2 micro-batches a step (gradient accumulation)."""
    from harness.train.training import train

    spec = make_spec(
        tiny_model,
        chain_sum_task,
        max_steps=6,
        steps_per_generation=2,
        num_iterations=2,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=8,
    ).with_settings(DS)
    run_dir = tmp_path_factory.mktemp("ds") / "runs" / spec.run_id
    train(spec, run_dir)
    return run_dir


@pytest.mark.slow
def test_every_kept_group_is_unequal_and_every_dropped_one_equal(reused_run):
    groups = _groups(reused_run)
    for _, g in groups.iterrows():
        assert g["kept"] == (len(set(g["metric"])) > 1), g.to_dict()
        assert len(g["completions"]) == len(g["rewards"]) == 4
    assert not (groups["trained"] & ~groups["kept"]).any()  # no fill was needed here
    assert groups["kept"].any() and not groups["kept"].all()


@pytest.mark.slow
def test_the_counts_add_up_to_what_was_generated(reused_run):
    groups, df = _groups(reused_run), _metrics(reused_run)
    by_step = groups.groupby("step")
    generated_steps = sorted(by_step.groups)
    assert generated_steps == [1, 3, 5]  # one generation every 2 optimizer steps
    for step, g in by_step:
        row = df.loc[df["step"] == step].iloc[0]
        assert row[layout.DS_GROUPS_DRAWN] == len(g)
        assert row[layout.DS_GROUPS_KEPT] == g["kept"].sum()
        assert row[layout.DS_GROUPS_TRAINED] == g["trained"].sum()
        assert row[layout.DS_GEN_BATCHES] == g["gen_batch"].max()
        assert row[layout.DS_COMPLETIONS_GENERATED] == 4 * len(g)
        assert row[layout.DS_SHORT] == float(g["kept"].sum() < 4)  # 16 rows = 4 groups a generation
        assert row[layout.DS_REWARD_GENERATED] == pytest.approx(
            np.mean(np.concatenate(g["rewards"].to_list()))
        )
        # TRL scored exactly the trained groups again: its reward is theirs, none of zero std
        trained = np.concatenate(g.loc[g["trained"], "rewards"].to_list())
        assert row["reward"] == pytest.approx(trained.mean(), abs=1e-6)
        assert row["frac_reward_zero_std"] == 0.0
    others = df.loc[~df["step"].isin(generated_steps)]
    assert (others[layout.DS_GROUPS_DRAWN] == 0).all() and (others[layout.TOKENS_GENERATED] == 0).all()
    # both micro-batches of each step and both passes over each batch train the trained groups
    trained_rows = by_step["trained"].sum().to_numpy() * 4
    assert df["w_seq/n"].to_numpy().tolist() == np.repeat(trained_rows, 2).tolist()
    assert (df.loc[df["step"].isin(generated_steps), layout.TOKENS_GENERATED] > 0).all()


@pytest.mark.slow
def test_a_stopped_and_resumed_run_equals_the_uninterrupted_one(tiny_model, chain_sum_task, tmp_path):
    from harness.compare import compare_runs
    from harness.train.training import train

    spec = make_spec(tiny_model, chain_sum_task, max_steps=5).with_settings(
        {**DS, "harness.checkpoint_steps": 2}
    )
    whole = tmp_path / "whole" / "runs" / spec.run_id
    train(spec, whole)
    resumed = tmp_path / "resumed" / "runs" / spec.run_id
    calls = []
    assert train(spec, resumed, stop_requested=lambda: calls.append(1) or len(calls) >= 3)["steps"] == 3
    assert train(spec, resumed)["resumed_from"] == 3
    assert (resumed / layout.DS_LOG_FILE).read_text() == (whole / layout.DS_LOG_FILE).read_text()
    steps, diffs = compare_runs(whole, resumed, rtol=0.0, atol=1e-7)
    assert steps == [1, 2, 3, 4, 5]
    assert [d for d in diffs if not d.agrees] == []


@pytest.mark.slow
def test_a_loss_plugin_trains_on_the_kept_groups(tiny_model, chain_sum_task, tmp_path):
    from harness.train.training import train

    spec = make_spec(tiny_model, chain_sum_task, max_steps=3, loss_type="gmpo").with_settings(DS)
    run_dir = tmp_path / "runs" / spec.run_id
    train(spec, run_dir)
    groups, df = _groups(run_dir), _metrics(run_dir)
    trained = groups.groupby("step")["trained"].sum().to_numpy() * 4
    assert df["w_seq/n"].tolist() == trained.tolist()
    assert df[layout.DS_GROUPS_DRAWN].gt(0).all()


@pytest.mark.slow
def test_two_processes_keep_the_same_groups(tmp_path, model_cache):
    """tasks_per_node = 2: both ranks filter the rewards gathered from both, choose the same rows
    (the trainer checks it at every generation and raises otherwise), and train their halves."""
    from helpers import FAST_OVERRIDES, cli

    results = tmp_path / "results"
    cli(
        "run",
        "ablations/smoke.yaml",
        "--results",
        str(results),
        *FAST_OVERRIDES,
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo]",
        "-otask.train_size=256",
        "-otrainer.max_steps=4",
        "-otrainer.per_device_train_batch_size=8",
        "-odynamic_sampling.enable=true",
        "-odynamic_sampling.max_gen_batches=3",
        "-oexecutor.tasks_per_node=2",
        "-oharness.eval_steps=0",
        "--no-report",
    )
    (run_dir,) = (results / "smoke" / layout.RUNS_DIR).iterdir()
    groups, df = _groups(run_dir), _metrics(run_dir)
    assert df["step"].tolist() == [1, 2, 3, 4]
    per_step = groups.groupby("step")
    generating = df.loc[df["step"].isin(list(per_step.groups))]  # smoke reuses each batch (mu = 2)
    assert generating["step"].tolist() == [1, 3]
    assert per_step["trained"].sum().tolist() == generating[layout.DS_GROUPS_TRAINED].tolist()
    assert per_step.size().tolist() == generating[layout.DS_GROUPS_DRAWN].tolist()  # each group written once
    # every trained completion of both ranks is in the w_seq statistics of both passes
    trained = np.repeat(generating[layout.DS_GROUPS_TRAINED].to_numpy() * 8, 2)  # G = 8 in base.yaml
    assert (df["w_seq/n"] + df["w_seq/n_masked"]).tolist() == trained.tolist()
    for _, g in groups.iterrows():
        assert g["kept"] == (len(set(g["metric"])) > 1)
