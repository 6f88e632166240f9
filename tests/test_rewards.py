"""Rewards as a registry (harness.rewards) and the checks of task.rewards and dynamic_sampling.

Fast: the built-ins against TRL's own functions, a reward plugin registered and bound, the
settings read from a function's signature, and every bad setting refused at plan with its key,
value and fix (nothing written). Slow: a run with a plugin reward written as docs/rewards.md says,
its mean and std in the record.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from helpers import cli

from harness import rewards
from harness.config.grid import expand
from harness.config.schema import SpecError, TaskSpec
from harness.config.spec import load_grid
from harness.config.validate import validate_plan

BASE = {
    "name": "rw",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "harness": {"device": "cpu", "eval_steps": 0},
    "trainer": {
        "max_steps": 3,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 16,
    },
}


def _plan(tmp_path: Path, **top):
    data = {**BASE, **top}
    for key in ("task", "trainer"):
        data[key] = {**BASE[key], **(top.get(key) or {})}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return validate_plan(expand(load_grid(path)))


def _errors(tmp_path: Path, **top) -> str:
    report = _plan(tmp_path, **top)
    assert not report.ok, report.format()
    return report.format()


def test_soft_overlong_is_trls_function():
    from trl.rewards import get_soft_overlong_punishment

    plugin, _ = rewards.find("soft_overlong")
    ids = [[1] * n for n in (3, 12, 13, 15, 16, 17)]
    mine = rewards.BoundReward(plugin, None, 16, {"soft_punish_cache": 4})(
        completion_ids=ids, completions=[""] * 6
    )
    assert mine == get_soft_overlong_punishment(16, 4)(ids)
    assert mine == [0.0, 0.0, -0.25, -0.75, -1.0, -1.0]  # DAPO Eq. 13 with L_max 16, L_cache 4
    assert plugin.settings == {"soft_punish_cache": 16}


def test_a_plugin_reward_is_one_decorated_function(clean_registry):
    @rewards.register_reward("brevity_t")
    def brevity_t(completions, completion_ids, *, target_tokens: int = 4, scale: float = 1.0, **_):
        return [scale * (len(ids) <= target_tokens) for ids in completion_ids]

    plugin, problems = rewards.find("brevity_t")
    assert not problems and plugin.settings == {"target_tokens": 4, "scale": 1.0}
    bound = rewards.BoundReward(plugin, None, 16, {"target_tokens": 2})
    assert bound.__name__ == "brevity_t"  # TRL logs rewards/brevity_t/mean and /std
    assert bound(completions=["", ""], completion_ids=[[1, 2], [1, 2, 3]]) == [1.0, 0.0]
    assert plugin.setting_problems({"target_tokens": "2", "scal": 2.0}, 16) == [
        "task.rewards: brevity_t's target_tokens = '2' is a str; its default 4 is a int: give one of that type.",
        "task.rewards: 'scal' is not a setting of reward 'brevity_t' (its settings: target_tokens, scale). "
        "Did you mean 'scale'?",
    ]
    with pytest.raises(rewards.RewardError, match="already registers"):
        rewards.register_reward("brevity_t")(lambda completions, **_: [])
    with pytest.raises(rewards.RewardError, match="has no default"):

        @rewards.register_reward("needs_default")
        def needs_default(completions, *, target, **_):
            return []


@pytest.mark.parametrize(
    ("task", "trainer", "expected"),
    [
        ({"rewards": ["corectness"]}, {}, "Did you mean 'correctness'?"),
        (
            {"rewards": ["correctness", {"name": "soft_overlong", "soft_punish_cache": 32}]},
            {},
            "soft_overlong's soft_punish_cache = 32 must be in [1, max_completion_length = 16]",
        ),
        (
            {"rewards": ["correctness", {"name": "soft_overlong", "soft_punish_cach": 8}]},
            {},
            "Did you mean 'soft_punish_cache'?",
        ),
        (
            {"rewards": ["correctness", "format"]},
            {"reward_weights": [1.0, 0.5, 0.2]},
            "has 3 weight(s) but task.rewards = ['correctness', 'format'] has 2",
        ),
        (
            {"rewards": ["correctness", {"name": "format", "weight": 0.5}]},
            {"reward_weights": [1.0, 0.5]},
            "the weights are given twice",
        ),
    ],
)
def test_bad_rewards_are_refused_at_plan(tmp_path, task, trainer, expected):
    assert expected in _errors(tmp_path, task=task, trainer=trainer)


def _said(tmp_path: Path, **top) -> str:
    """What a user is told: the file's problems when it loads, else the plan's errors."""
    try:
        return _errors(tmp_path, **top)
    except SpecError as e:
        return str(e)


def test_a_malformed_reward_entry_names_the_fix(tmp_path):
    text = _said(tmp_path, task={"rewards": ["correctness", {"weight": 2}]})
    assert "task.rewards" in text and "{name: soft_overlong" in text


def test_weights_in_task_rewards_are_trls_reward_weights(tmp_path):
    from harness.losses import grpo_config_kwargs

    report = _plan(tmp_path, task={"rewards": ["correctness", {"name": "format", "weight": 0.25}]})
    assert report.ok, report.format()
    (run,) = expand(load_grid(tmp_path / "g.yaml")).runs
    assert grpo_config_kwargs(run, "cpu", "out")["reward_weights"] == [1.0, 0.25]


@pytest.mark.parametrize(
    ("section", "trainer", "expected"),
    [
        ({"enable": True, "metric": "corectness"}, {}, "Did you mean 'correctness'?"),
        ({"enable": True}, {"scale_rewards": "batch"}, "scale_rewards = 'batch'"),
        (
            {"enable": True},
            {"multi_objective_aggregation": "normalize_then_sum"},
            "multi_objective_aggregation = 'normalize_then_sum'",
        ),
    ],
)
def test_bad_dynamic_sampling_is_refused_at_plan(tmp_path, section, trainer, expected):
    assert expected in _errors(tmp_path, dynamic_sampling=section, trainer=trainer)


def test_dynamic_sampling_fields_are_checked_where_declared(tmp_path):
    text = _said(tmp_path, dynamic_sampling={"enable": True, "metrc": "reward"})
    assert "dynamic_sampling" in text and "'metrc'" in text and "metric" in text
    text = _said(tmp_path, dynamic_sampling={"enable": True, "max_gen_batches": 0})
    assert "dynamic_sampling.max_gen_batches = 0 must be >= 1" in text


def test_dynamic_sampling_settings_without_enable_are_a_warning(tmp_path):
    report = _plan(tmp_path, dynamic_sampling={"max_gen_batches": 4})
    assert report.ok and "without dynamic_sampling.enable: true" in report.format()


def test_a_bad_reward_grid_writes_nothing(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({**BASE, "task": {**BASE["task"], "rewards": ["corectness"]}}))
    results = tmp_path / "results"
    proc = cli("run", str(grid), "--results", str(results), check=False)
    assert proc.returncode == 2 and "Did you mean 'correctness'?" in proc.stderr
    assert not results.exists()


def test_task_spec_rewards_keep_their_identity():
    a = TaskSpec("chain_sum", {}, rewards=["correctness", {"name": "soft_overlong", "soft_punish_cache": 8}])
    b = TaskSpec("chain_sum", {}, rewards=("correctness", {"name": "soft_overlong", "soft_punish_cache": 8}))
    assert a == b and hash(a) == hash(b)


PLUGIN = '''
from harness.rewards import register_reward


@register_reward("short_answer")
def short_answer(completions, completion_ids, *, max_tokens: int = 3, **kwargs):
    """1.0 for a completion of at most max_tokens tokens, else 0.0."""
    return [1.0 if len(ids) <= max_tokens else 0.0 for ids in completion_ids]
'''


@pytest.mark.slow
def test_a_reward_plugin_from_the_docs_runs_and_is_recorded(tmp_path, model_cache):
    import pandas as pd

    from harness import layout

    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(PLUGIN))
    grid = tmp_path / "g.yaml"
    data = {
        **BASE,
        "model": "tiny",
        "tiny": {"sft_steps": 30, "sft_examples": 512},
        "plugins": ["my_rewards"],
        "task": {
            **BASE["task"],
            "train_size": 64,
            "rewards": ["correctness", {"name": "short_answer", "weight": 0.5}],
        },
        "executor": {"name": "local"},
    }
    grid.write_text(yaml.safe_dump(data))
    env_path = f"{tmp_path}:{':'.join(sys.path)}"
    import os

    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env_path
    try:
        cli("run", str(grid), "--results", str(tmp_path / "results"), "--no-report")
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)
    (run_dir,) = (tmp_path / "results" / "rw" / layout.RUNS_DIR).iterdir()
    df = pd.read_parquet(run_dir / layout.METRICS_DIR)
    assert df["rewards/short_answer/mean"].between(0, 1).all() and "rewards/short_answer/std" in df
    expected = df["rewards/correctness/mean"] + 0.5 * df["rewards/short_answer/mean"]
    assert (df["reward"] - expected).abs().max() < 1e-5  # TRL's weighted sum with task.rewards' weights
