"""Rules on loss fields follow what a loss reads (TRL's table for a built-in, a plugin's declared
``reads`` and ``ratio_cap``), not the loss's name: a plugin mirror of cispo is refused the cap cispo
is refused, a mirror of vespo is allowed the VESPO fields it reads."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from harness import losses
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.losses import PluginError, register_loss

BASE = {
    "name": "reads",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "harness": {"device": "cpu", "checkpoint_steps": 2},
    "trainer": {
        "max_steps": 3,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
    },
}


def validation(tmp_path: Path, trainer: dict, plugins=("harness.losses.mirrors",)):
    data = {**BASE, "plugins": list(plugins), "trainer": {**BASE["trainer"], **trainer}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return validate_plan(expand(load_grid(path)))


def errors(report) -> str:
    return "\n".join(f.message for f in report.errors)


@pytest.mark.parametrize("loss", ["cispo", "cispo_mirror"])
def test_a_ratio_cap_below_one_is_refused_whatever_the_loss_is_called(tmp_path, loss):
    report = validation(tmp_path, {"loss_type": loss, "epsilon_high": 0.5})
    assert f"trainer.epsilon_high = 0.5 with loss_type {loss}" in errors(report)
    assert "absolute cap on the ratio" in errors(report)
    assert validation(tmp_path, {"loss_type": loss, "epsilon_high": 5.0}).ok


def test_the_cap_falls_back_to_epsilon_as_trl_does(tmp_path):
    report = validation(tmp_path, {"loss_type": "cispo_mirror", "epsilon": 0.2})
    assert "trainer.epsilon_high = 0.2" in errors(report)


def test_a_clip_range_loss_takes_epsilon_high_below_one(tmp_path):
    assert validation(tmp_path, {"loss_type": "grpo_mirror", "epsilon_high": 0.28}).ok


VESPO = {"vespo_k_pos": 3.0, "vespo_lambda_neg": 2.5}


@pytest.mark.parametrize("loss", ["vespo", "vespo_mirror"])
def test_vespo_fields_are_accepted_by_the_losses_that_read_them(tmp_path, loss):
    report = validation(tmp_path, {"loss_type": loss, **VESPO})
    assert report.ok, errors(report)


@pytest.mark.parametrize("loss", ["grpo", "grpo_mirror", "cispo_mirror", "sapo"])
def test_vespo_fields_are_refused_where_the_loss_does_not_read_them(tmp_path, loss):
    text = errors(validation(tmp_path, {"loss_type": loss, **VESPO}))
    assert f"loss_type = {loss!r}, which does not read them" in text
    assert "vespo" in text.split("only ", 1)[1]


def test_sapo_temperatures_follow_sapo(tmp_path):
    assert validation(tmp_path, {"loss_type": "sapo", "sapo_temperature_pos": 2.0}).ok
    text = errors(validation(tmp_path, {"loss_type": "dapo", "sapo_temperature_pos": 2.0}))
    assert "trainer.sapo_temperature_pos set while loss_type = 'dapo'" in text
    assert "only sapo reads it" in text


UNDECLARED = """
from harness.losses import register_loss

@register_loss("reads_undeclared", reduction="dapo")
def f(inputs):
    k = inputs.config.vespo_k_pos
    return -(k / 2.0) * inputs.advantages * inputs.per_token_logps
"""


def test_an_undeclared_plugin_may_read_any_field(tmp_path, monkeypatch, clean_registry):
    (tmp_path / "reads_plugin_u").mkdir()
    (tmp_path / "reads_plugin_u" / "__init__.py").write_text(textwrap.dedent(UNDECLARED))
    monkeypatch.syspath_prepend(str(tmp_path))
    report = validation(tmp_path, {"loss_type": "reads_undeclared", **VESPO}, plugins=["reads_plugin_u"])
    assert report.ok, errors(report)


def test_sapo_temperature_axis_on_policy_is_said_to_act_on_nothing(tmp_path):
    data = {
        **BASE,
        "trainer": {**BASE["trainer"], "loss_type": "sapo"},
        "grid": {"sapo_temperature_pos": [1.0, 2.0]},
    }
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    report = validate_plan(expand(load_grid(path)))
    assert report.ok
    text = report.format()
    assert "sapo_temperature_pos varies in on-policy cells" in text


def test_ratio_cap_declarations_are_checked_at_registration(clean_registry):
    with pytest.raises(PluginError, match="the cap is 'epsilon_high'"):
        register_loss("reads_bad_cap", ratio_cap="delta")
    with pytest.raises(PluginError, match="add 'epsilon_high' to reads="):
        register_loss("reads_cap_unread", reads=["epsilon"], ratio_cap="epsilon_high")


def test_loss_reads_of_builtins_and_plugins():
    from harness.losses import mirrors  # noqa: F401

    assert losses.loss_reads("vespo")[-1] == "importance_sampling_level"
    assert "vespo_k_pos" in losses.loss_reads("vespo_mirror")
    assert losses.ratio_cap("cispo") == losses.ratio_cap("cispo_mirror") == "epsilon_high"
    assert losses.ratio_cap("grpo") is None
    assert losses.loss_reads("no_such_loss") is None
