"""What a loss plugin declares about itself (the fields it reads, its off-policy-only hyperparameters,
the TRL loss it equals on-policy): checked on synthetic batches before anything runs, and turned
into validation warnings for the cells it makes identical."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import yaml

from harness import losses
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.losses import Hyperparameter, PluginError, register_loss
from harness.losses import mirrors as _mirrors  # noqa: F401  (registers the mirrors)
from harness.losses import variants as _variants  # noqa: F401  (registers gmpo, kl_cov)
from harness.losses.compute import LossOutput
from harness.losses.declarations import _check, declaration_problems

BASE = {
    "name": "d",
    "model": "tiny",
    "task": {
        "name": "chain_sum",
        "kwargs": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    },
    "trainer": {
        "max_steps": 2,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 6,
    },
}
OFF_POLICY = {"num_iterations": 2}


@pytest.fixture
def registry():
    """Plugins registered by a test are dropped after it (and the memoised checks of their names)."""
    saved = dict(losses.REGISTRY)
    yield losses.REGISTRY
    losses.REGISTRY.clear()
    losses.REGISTRY.update(saved)
    _check.cache_clear()


def _plan(tmp_path, trainer, grid=None, plugins=None):
    data = {**BASE, "trainer": {**BASE["trainer"], **trainer}, **({"grid": grid} if grid else {})}
    if plugins:
        data["plugins"] = plugins
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return validate_plan(expand(load_grid(path)))


def _warnings(report) -> list[str]:
    return [w.message for w in report.warnings]


def test_the_projects_declarations_hold():
    assert declaration_problems("gmpo") == ()
    assert declaration_problems("kl_cov") == ()
    assert losses.REGISTRY["gmpo"].reads == () and losses.REGISTRY["gmpo"].on_policy_equivalent == "grpo"
    assert losses.REGISTRY["kl_cov"].on_policy_equivalent == "dapo"
    assert all(h.off_policy_only for p in ("gmpo", "kl_cov") for h in losses.REGISTRY[p].hyperparameters)


def test_a_false_on_policy_equivalent_is_found(registry):
    """GMPO on-policy is grpo's gradient (per-completion token mean), not dapo's (token mean over the
    batch): the reductions differ when completions differ in length."""
    registry["gmpo_as_dapo"] = dataclasses.replace(
        registry["gmpo"], name="gmpo_as_dapo", on_policy_equivalent="dapo"
    )
    (problem,) = declaration_problems("gmpo_as_dapo")
    assert "declares on_policy_equivalent='dapo'" in problem and "differs from TRL's dapo" in problem


def test_a_field_read_though_declared_unread_is_found(registry):
    """grpo_mirror reads all four loss fields (clip range, delta, the ratio's level): reads=() is false."""
    registry["mirror_reads_nothing"] = dataclasses.replace(
        registry["grpo_mirror"], name="mirror_reads_nothing", reads=()
    )
    problems = declaration_problems("mirror_reads_nothing")
    text = "\n".join(problems)
    assert "setting epsilon = 0.05 moves its loss or gradient" in text
    assert "setting importance_sampling_level = 'sequence' moves" in text
    assert "add 'epsilon' to reads=" in text
    assert "setting epsilon_high = 0.5 moves" in text
    assert "setting delta = 1.1 moves" in text  # the two-sided clip: ratios reach e^0.6 here


def test_an_off_policy_only_hyperparameter_that_acts_on_policy_is_found(registry):
    @register_loss(
        "scaled_pg_d",
        reduction="dapo",
        reads=(),
        hyperparameters=[
            Hyperparameter("scaled_pg_d_scale", float, 1.0, "scale", minimum=0.0, off_policy_only=True)
        ],
    )
    def scaled(inputs):
        return LossOutput(-inputs.hparams["scaled_pg_d_scale"] * inputs.advantages * inputs.per_token_logps)

    (problem,) = declaration_problems("scaled_pg_d")
    assert "declares hyperparameter 'scaled_pg_d_scale' off_policy_only" in problem
    assert "scaled_pg_d_scale = 2.0 instead of 1.0" in problem and "drop off_policy_only=True" in problem


def test_register_loss_refuses_unknown_declarations(registry):
    with pytest.raises(PluginError, match="'beta' is not one of the loss fields a plugin can read"):
        register_loss("bad_reads_d", reads=["epsilon", "beta"])
    with pytest.raises(PluginError, match="give a list of field names"):
        register_loss("bad_reads_d", reads="epsilon")
    with pytest.raises(PluginError, match="on_policy_equivalent='reinforce'"):
        register_loss("bad_equiv_d", on_policy_equivalent="reinforce")
    with pytest.raises(PluginError, match="'my.scale': a name is an identifier"):
        Hyperparameter("my.scale", float, 1.0)


def test_a_false_declaration_is_a_plan_error(tmp_path, registry):
    """A token-mean policy gradient under the dapo reduction is dapo on-policy, not grpo: refused for
    on-policy runs, the only ones the equivalence is said of (off-policy runs are not checked)."""

    @register_loss("pg_as_grpo_d", reduction="dapo", reads=(), on_policy_equivalent="grpo")
    def pg(inputs):
        return LossOutput(-inputs.advantages * torch.exp(inputs.log_ratio))

    report = _plan(tmp_path, {"loss_type": "pg_as_grpo_d"})
    assert not report.ok
    (error,) = [e.message for e in report.errors]
    assert "declares on_policy_equivalent='grpo'" in error and "differs from TRL's grpo" in error
    assert not any("grpo runs" in w for w in _warnings(report))  # nothing said on the false declaration
    assert _plan(tmp_path, {"loss_type": "pg_as_grpo_d", **OFF_POLICY}).ok
    registry["pg_as_dapo_d"] = dataclasses.replace(
        registry["pg_as_grpo_d"], name="pg_as_dapo_d", on_policy_equivalent="dapo"
    )
    assert _plan(tmp_path, {"loss_type": "pg_as_dapo_d"}).ok


def test_on_policy_plugin_runs_are_told_whose_gradient_they_have(tmp_path):
    on = _plan(tmp_path, {"loss_type": "gmpo"}, grid={"gmpo_clip_low": [0.2, 0.4]})
    assert on.ok
    text = "\n".join(_warnings(on))
    assert "gmpo's gradient is grpo's" in text and "these runs are grpo runs up to rounding" in text
    assert "gmpo_clip_low varies in on-policy cells" in text  # an off-policy-only hyperparameter
    off = _plan(tmp_path, {"loss_type": "gmpo", **OFF_POLICY}, grid={"gmpo_clip_low": [0.2, 0.4]})
    assert off.ok and not any("gradient is" in w or "no effect" in w for w in _warnings(off))


def test_a_field_the_plugin_ignores_is_a_warning(tmp_path):
    report = _plan(tmp_path, {"loss_type": "kl_cov", **OFF_POLICY}, grid={"epsilon_high": [0.28, 0.4]})
    assert report.ok
    (warning,) = {w for w in _warnings(report) if "no effect" in w}  # one per cell, the same words
    assert warning.startswith("trainer.epsilon_high set with loss_type kl_cov: the plugin declares")
    assert "differ only in name" in warning
    # a TRL loss that reads it, and a plugin that declares nothing, are not warned about
    assert not any(
        "no effect" in w
        for w in _warnings(
            _plan(tmp_path, {"loss_type": "dapo", **OFF_POLICY}, grid={"epsilon_high": [0.28, 0.4]})
        )
    )
    undeclared = _plan(
        tmp_path,
        {"loss_type": "grpo_mirror", **OFF_POLICY},
        grid={"epsilon_high": [0.28, 0.4]},
        plugins=["harness.losses.mirrors"],
    )
    assert undeclared.ok and not any("no effect" in w for w in _warnings(undeclared))


@pytest.mark.slow
def test_plan_shows_the_declarations(tmp_path):
    from helpers import cli

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({**BASE, "trainer": {**BASE["trainer"], "loss_type": "kl_cov"}}))
    out = cli("plan", str(path)).stdout
    assert "kl_cov_coef: float = 1.0, >= 0 (off-policy only)" in out
    assert "reads: none of epsilon, epsilon_high, delta, importance_sampling_level" in out
    assert "on-policy equivalent: dapo (declared; validation says so of each on-policy run where" in out


def test_an_equivalence_is_claimed_only_where_it_holds(tmp_path, registry):
    """Declared at the defaults (scale 1), a scaled policy gradient is dapo's only at scale 1: the run at
    0.5 is not told it is a dapo run, and neither is gmpo under TRL's entropy mask, which trains
    only the high-entropy tokens of grpo but spreads gmpo's sequence ratio over all of them."""

    @register_loss(
        "scaled_dapo_d",
        reduction="dapo",
        reads=(),
        on_policy_equivalent="dapo",
        hyperparameters=[Hyperparameter("scaled_dapo_d_scale", float, 1.0, "scale", minimum=0.0)],
    )
    def scaled(inputs):
        return LossOutput(
            -inputs.hparams["scaled_dapo_d_scale"] * inputs.advantages * torch.exp(inputs.log_ratio)
        )

    assert declaration_problems("scaled_dapo_d") == ()
    report = _plan(tmp_path, {"loss_type": "scaled_dapo_d"}, grid={"scaled_dapo_d_scale": [1.0, 0.5]})
    assert report.ok
    told = {w.run_id for w in report.warnings if "these runs are dapo runs" in w.message}
    (one,) = [
        r.run_id
        for r in expand(load_grid(tmp_path / "g.yaml")).runs
        if r.trainer["scaled_dapo_d_scale"] == 1.0
    ]
    assert told == {one}
    masked = _plan(tmp_path, {"loss_type": "gmpo", "top_entropy_quantile": 0.2})
    assert masked.ok and not any("gradient is grpo's" in w for w in _warnings(masked))
    assert any("gradient is grpo's" in w for w in _warnings(_plan(tmp_path, {"loss_type": "gmpo"})))


def test_a_plugin_reading_the_clip_is_not_told_it_has_no_effect_on_policy(tmp_path, registry):
    """A cap below 1 acts on-policy (as cispo's does): the harness cannot claim the clip is idle for a
    plugin, only for what the plugin declares off-policy only."""

    @register_loss("capped_d", reduction="dapo", reads=("epsilon", "epsilon_high"))
    def capped(inputs):
        weight = torch.clamp(torch.exp(inputs.log_ratio), max=inputs.epsilon_high).detach()
        return LossOutput(-weight * inputs.advantages * inputs.per_token_logps)

    report = _plan(tmp_path, {"loss_type": "capped_d"}, grid={"epsilon_high": [0.5, 5.0]})
    assert report.ok and not any("no effect" in w for w in _warnings(report))


@pytest.mark.slow
def test_declarations_are_checked_at_the_runs_values(tmp_path, registry):
    """A field read only past a threshold, a str hyperparameter, a term that exists only with beta > 0,
    and a plugin drawing random numbers (compared with itself under a fixed seed)."""

    @register_loss("branch_d", reduction="dapo", reads=())
    def branch(inputs):
        ratio = torch.exp(inputs.log_ratio)
        if inputs.epsilon_low > 0.25:
            ratio = torch.clamp(ratio, 1 - inputs.epsilon_low, 1 + inputs.epsilon_high)
        return LossOutput(-ratio * inputs.advantages)

    # at epsilon 0.2 (and 0.05, tried) the branch is never taken
    assert _plan(tmp_path, {"loss_type": "branch_d", **OFF_POLICY}).ok
    report = _plan(tmp_path, {"loss_type": "branch_d", **OFF_POLICY}, grid={"epsilon": [0.2, 0.3]})
    errors = {(e.run_id, e.message) for e in report.errors}
    (at_03,) = [r.run_id for r in expand(load_grid(tmp_path / "g.yaml")).runs if r.trainer["epsilon"] == 0.3]
    assert {rid for rid, _ in errors} == {at_03}
    assert any("declares reads=[], but setting epsilon = 0.05 moves its loss" in m for _, m in errors)

    @register_loss(
        "mode_d", reduction="dapo", reads=(),
        hyperparameters=[Hyperparameter("mode_d_mode", str, "pg", "sign", off_policy_only=True)],
    )  # fmt: skip
    def mode(inputs):
        sign = 1.0 if inputs.hparams["mode_d_mode"] == "pg" else -1.0
        return LossOutput(-sign * inputs.advantages * torch.exp(inputs.log_ratio))

    assert declaration_problems("mode_d") == ()  # a str without choices: nothing else to try at the default
    report = _plan(tmp_path, {"loss_type": "mode_d"}, grid={"mode_d_mode": ["pg", "anti"]})
    assert any("declares hyperparameter 'mode_d_mode' off_policy_only" in e.message for e in report.errors)

    @register_loss(
        "ref_d", reduction="dapo", reads=(),
        hyperparameters=[Hyperparameter("ref_d_coef", float, 0.0, "weight", minimum=0.0, off_policy_only=True)],
    )  # fmt: skip
    def ref_term(inputs):
        loss = -inputs.advantages * torch.exp(inputs.log_ratio)
        if inputs.ref_per_token_logps is not None:
            loss = (
                loss
                + inputs.hparams["ref_d_coef"] * (inputs.per_token_logps - inputs.ref_per_token_logps) ** 2
            )
        return LossOutput(loss)

    assert _plan(tmp_path, {"loss_type": "ref_d"}).ok
    report = _plan(tmp_path, {"loss_type": "ref_d", "beta": 0.04})
    assert any("'ref_d_coef' off_policy_only" in e.message for e in report.errors)

    @register_loss("noisy_d", reduction="dapo", reads=())
    def noisy(inputs):
        keep = (torch.rand_like(inputs.log_ratio) < 0.5).float()
        return LossOutput(-keep * inputs.advantages * torch.exp(inputs.log_ratio))

    assert _plan(tmp_path, {"loss_type": "noisy_d", **OFF_POLICY}).ok


def test_a_plugin_raising_in_a_check_says_what_was_tried(registry):
    @register_loss("level_d", reduction="dapo", reads=())
    def level(inputs):
        if inputs.log_importance_weights.shape[1] == 1:
            raise ValueError("token weights only")
        return LossOutput(-inputs.advantages * torch.exp(inputs.log_importance_weights))

    (problem,) = declaration_problems("level_d")
    assert "raised ValueError: token weights only" in problem
    assert "B=8, T=16, trying importance_sampling_level = 'sequence'" in problem


def test_a_nan_in_the_empty_row_neither_hides_a_change_nor_passes_the_probe(tmp_path, registry):
    """A per-sequence mean without clamp is NaN in a row with no tokens: the probe refuses it (the
    reduced loss would be NaN), and the declaration checks count a NaN that appears as a change."""

    @register_loss(
        "nan_d", reduction="grpo", reads=(),
        hyperparameters=[Hyperparameter("nan_d_c", float, 1.0, "scale", off_policy_only=True)],
    )  # fmt: skip
    def nan_loss(inputs):
        t = -torch.exp(inputs.log_ratio) * inputs.advantages * inputs.hparams["nan_d_c"]
        return LossOutput((t * inputs.mask).sum(-1, keepdim=True) / inputs.mask.sum(-1, keepdim=True))

    report = _plan(tmp_path, {"loss_type": "nan_d"}, grid={"nan_d_c": [0.5, 1.0]})
    assert any(
        "returned NaN or inf in row(s) [2]" in e.message and "clamp(min=1)" in e.message
        for e in report.errors
    )
    assert not any("no effect" in w for w in _warnings(report))
    from harness.losses.declarations import _moved

    nan = torch.tensor([1.0, float("nan")])
    assert _moved((nan, nan), (nan, nan)) == 0.0
    assert _moved((nan, nan), (torch.tensor([1.0, 2.0]), nan)) == float("inf")


def test_the_kl_correction_reads_the_level_whatever_the_plugin_reads(tmp_path):
    """Under use_bias_correction_kl with beta > 0 the KL term is weighted by the level's ratio: an
    importance_sampling_level axis matters even for gmpo, which reads none of the loss fields."""
    grid = {"importance_sampling_level": ["token", "sequence"]}
    plain = _plan(tmp_path, {"loss_type": "gmpo", **OFF_POLICY}, grid=grid)
    assert any("trainer.importance_sampling_level set with loss_type gmpo" in w for w in _warnings(plain))
    kl = _plan(
        tmp_path, {"loss_type": "gmpo", "beta": 0.04, "use_bias_correction_kl": True, **OFF_POLICY}, grid=grid
    )
    assert kl.ok and not any("importance_sampling_level set" in w for w in _warnings(kl))
