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
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.settings.schema import SpecError, TaskSpec

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
    ("name", "define", "refused"),
    [
        ("no_kwargs", lambda: lambda completions, *, max_tokens=3: [], "takes no \\*\\*kwargs"),
        ("weighted", lambda: lambda completions, *, weight=1.0, **_: [], "cannot be called 'weight'"),
        ("reward", lambda: lambda completions, **_: [], "names the weighted sum"),
        ("correctness", lambda: lambda completions, **_: [], "is a built-in reward"),
    ],
)
def test_a_reward_that_would_fail_in_trl_is_refused_when_registered(clean_registry, name, define, refused):
    with pytest.raises(rewards.RewardError, match=refused):
        rewards.register_reward(name)(define())


def test_an_entry_column_is_no_setting_and_a_raising_check_is_named(clean_registry):
    @rewards.register_reward("uses_entry")
    def uses_entry(completions, entry, *, scale: float = 1.0, **_):
        return [scale * (e is not None) for e in entry]

    assert rewards.REGISTRY["uses_entry"].settings == {"scale": 1.0}  # entry is TRL's column, taken by name
    assert (
        "must be a finite number"
        in rewards.REGISTRY["uses_entry"].setting_problems({"scale": float("inf")}, 8)[0]
    )

    def boom(settings, budget):
        raise ValueError("no")

    rewards.register_reward("checked_t", check=boom)(lambda completions, **_: [])
    (problem,) = rewards.REGISTRY["checked_t"].setting_problems({}, 8)
    assert "the check of reward 'checked_t'" in problem and "raised ValueError: no" in problem


def test_the_builtins_are_the_schemas():
    from harness.settings.schema import REWARD_NAMES

    assert rewards.BUILTIN_NAMES == REWARD_NAMES


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


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"weight": 2}, "the mapping has no name"),
        ({"name": "correctness", "weight": float("nan")}, "correctness's weight nan is not a finite number"),
        ({"name": "correctness", "weight": "1e-3"}, "YAML 1.1 reads an exponent without a dot"),
        (
            {"name": "format", "weight": 1.0, "extra": [1, 2]},
            "format's setting extra = [1, 2] is not a number",
        ),
        (["correctness"], "a list is neither a reward's name nor a mapping"),
    ],
)
def test_a_malformed_reward_entry_says_why_and_the_fix(tmp_path, entry, reason):
    text = _said(tmp_path, task={"rewards": ["correctness", entry] if entry != ["correctness"] else [entry]})
    assert reason in text and "{name: soft_overlong" in text


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


SAMPLED = {"harness": {"device": "cpu", "eval_steps": 2, "sampled_eval_n": 4, "sampled_eval_prompts": 8}}


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        (
            {"report": {"metric": "eval/pass@8"}},
            "report.metric = eval/pass@8, but none of its runs records it",
        ),
        ({"report": {"metric": "eval/pass@3"}}, "reports pass@k for k = 1, 2, 4"),
        (
            {
                "findings": {
                    "F": {
                        "claim": "c",
                        "paper": "p",
                        "measure": "from_start",
                        "metric": "eval/pass@0",
                        "window": [0.9, 1.0],
                        "direction": "lower",
                        "baseline": "start",
                        "variant": {"max_steps": 3},
                    }
                }
            },
            "findings.F.metric = eval/pass@0: no run records it",
        ),
        (
            {"harness": {"device": "cpu", "eval_steps": 2}, "report": {"metric": "eval/sampled_accuracy"}},
            "the sampled eval is off in every one",
        ),
    ],
)
def test_a_sampled_metric_no_run_records_is_refused(tmp_path, top, expected):
    assert expected in _errors(tmp_path, **{**SAMPLED, **top})


def test_the_sampled_metrics_the_runs_record_are_accepted(tmp_path):
    for metric in ("eval/pass@1", "eval/pass@4", "eval/sampled_accuracy"):
        report = _plan(tmp_path, **SAMPLED, report={"metric": metric})
        assert report.ok, report.format()


def test_settings_that_cannot_act_on_the_new_surfaces_are_warned(tmp_path):
    text = _plan(tmp_path, harness={"device": "cpu", "eval_steps": 2, "sampled_eval_prompts": 8}).format()
    assert "harness.sampled_eval_prompts set with harness.sampled_eval_n = 0" in text
    text = _plan(
        tmp_path,
        task={"rewards": [{"name": "correctness", "weight": 0.0}]},
        dynamic_sampling={"enable": True},
    ).format()
    assert "every reward weight 0" in text and "dynamic_sampling.metric: correctness" in text
