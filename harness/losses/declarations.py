"""Checking what a loss plugin declares about itself, on synthetic batches, before anything runs.

A plugin may declare (:func:`harness.losses.register_loss`):

* ``reads``: which of :data:`harness.losses.LOSS_FIELDS` its function reads. At a run's settings,
  each field it does not list is changed in turn (``epsilon`` to 0.05, ``epsilon_high`` to 0.5,
  ``delta`` to 1.1, ``importance_sampling_level`` to ``sequence``, SAPO's and VESPO's fields to
  other positive values; to another value where the run already has that one) on an off-policy batch: its masked loss and the gradient of their sum into
  ``per_token_logps`` must not move.
* ``off_policy_only`` on a hyperparameter: on an on-policy batch (old log-probs = the detached
  current ones, every ratio exactly 1) the run's value, the default and one more allowed value must
  give the same loss and gradient. Every run is compared with the default, so the values a grid
  varies are compared with each other.
* ``on_policy_equivalent``: on an on-policy batch, the plugin path
  (:func:`harness.losses.compute.plugin_loss`) and TRL's own ``GRPOTrainer._compute_loss`` for that
  loss type, both on the stand-in trainer (:class:`harness.losses.stand_in.LossProbe`), give
  the same gradient into ``per_token_logps``. Checked for on-policy runs only (the only ones it is
  said of), at TRL's defaults with the plugin's defaults (a failure there is an error: the
  declaration is false) and at the run's settings (a failure there only withholds validation's
  "these runs are <loss> runs" warning: TRL options such as ``top_entropy_quantile`` legitimately
  break an equivalence).

The batches are B=8 completions of up to T=16 tokens (one row empty), run's ``beta`` and masks
included; the global RNG is seeded before every call, so a plugin drawing random numbers is
compared with itself; a NaN or inf where the other call has none counts as a change. A
declaration a check falsifies would make validation's warnings ("has no effect", "these runs are
grpo runs") false, so it is an error naming the fix. Passing is evidence, not proof: a branch the
batches do not reach is not seen. Tolerance :data:`TOL` (absolute, float32, values of order 1).
Verdicts are memoised in memory only (per plugin function, settings and values): a plugin's code,
or code it imports, may change between two ``plan`` calls.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from harness import losses
from harness.losses.compute import LossInputs, check_output, synthetic_inputs
from harness.trl_boundary import grpo_config_defaults, reuses_current_logps

TOL = 1e-6
B, T = 8, 16
LENGTHS = (16, 11, 7, 3, 1, 14, 9, 0)
#: For each field of LOSS_FIELDS: the changed values tried (the first that differs from the run's).
CHANGED = {
    "epsilon": (0.05, 0.3),
    "epsilon_high": (0.5, 0.05),
    "delta": (1.1, 2.0),
    "importance_sampling_level": ("sequence", "token"),
    "sapo_temperature_pos": (2.0, 0.5),
    "sapo_temperature_neg": (2.0, 0.5),
    "vespo_k_pos": (4.0, 1.0),
    "vespo_lambda_pos": (6.0, 1.5),
    "vespo_k_neg": (6.0, 1.5),
    "vespo_lambda_neg": (4.0, 1.0),
}
#: GRPOConfig fields that never reach the loss: left out of the checks' settings and memo keys.
IRRELEVANT = frozenset((
    "seed", "data_seed", "output_dir", "run_name", "logging_dir", "max_steps", "num_train_epochs",
    "save_steps", "save_total_limit", "logging_steps", "eval_steps", "learning_rate", "warmup_steps",
    "warmup_ratio", "lr_scheduler_type", "weight_decay", "report_to",
))  # fmt: skip
#: Fields the stand-in trainer sets itself (:class:`harness.losses.stand_in.LossProbe`).
STAND_IN_SETS = frozenset({"loss_type", "use_vllm", "max_completion_length"})


@dataclass(frozen=True)
class Verdict:
    """What the checks found for one run: ``problems`` (errors, each with its fix) and whether the
    declared ``on_policy_equivalent`` holds at the run's settings (False when none is declared)."""

    problems: tuple[str, ...]
    equivalent_here: bool


class _Stage:
    """What is being tried, for the message when the plugin raises."""

    def __init__(self) -> None:
        self.what = "its defaults"


def _inputs(settings: Mapping[str, Any], hparams: Mapping[str, Any], on_policy: bool) -> LossInputs:
    """The seeded batch: old log-probs drift by N(0, 0.3) nats per token off-policy and equal the
    current ones (detached) on-policy; a reference model's log-probs when ``beta`` > 0."""
    gen = torch.Generator().manual_seed(0)
    logps = (-3.0 * torch.rand(B, T, generator=gen)).requires_grad_(True)
    drift = 0.3 * torch.randn(B, T, generator=gen)
    ref = logps.detach() + 0.2 * torch.randn(B, T, generator=gen) if settings.get("beta") else None
    return synthetic_inputs(
        settings, hparams, settings.get("importance_sampling_level", "token"),
        per_token_logps=logps, old_per_token_logps=logps.detach() if on_policy else logps.detach() + drift,
        ref_per_token_logps=ref, advantages=torch.randn(B, 1, generator=gen),
        mask=(torch.arange(T).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)).to(torch.int32),
        entropies=2.0 * torch.rand(B, T, generator=gen),
    )  # fmt: skip


def _seeded(function, *args):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return function(*args)


def _loss_and_grad(
    plugin: losses.LossPlugin, settings: Mapping[str, Any], hparams: Mapping[str, Any], on_policy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The plugin's loss on the batch's unmasked tokens (B, T), and the gradient of their sum into
    ``per_token_logps`` (B, T)."""
    batch = _inputs(settings, hparams, on_policy)
    out = check_output(plugin, _seeded(plugin.function, batch), batch)
    masked = out.loss.expand_as(batch.mask) * batch.mask
    (grad,) = torch.autograd.grad(masked.sum(), batch.per_token_logps, allow_unused=True)
    grad = torch.zeros_like(batch.per_token_logps) if grad is None else grad
    return masked.detach(), grad


def _moved(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> float:
    """Max |difference| of losses and gradients; inf where only one is non-finite (NaN or inf in
    the same place in both counts as equal)."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        same = (x == y) | (torch.isnan(x) & torch.isnan(y))
        diff = torch.where(same, torch.zeros_like(x), (x - y).abs())
        worst = max(worst, float(torch.nan_to_num(diff, nan=float("inf")).max()))
    return worst


def _other_value(h: losses.Hyperparameter) -> Any:
    """An allowed value of ``h`` other than its default, or None when none is found to try."""
    if h.choices:
        return next((c for c in h.choices if c != h.default), None)
    if h.type is bool:
        return not h.default
    if h.type is str:
        return None
    d = h.default
    for v in (d * 2, d / 2, d + 1, d - 1, d + 0.5, d - 0.5, d + 0.01, d - 0.01, d + 1e-4, d - 1e-4):
        v = int(v) if h.type is int else float(v)
        if v != d and h.problem(v) is None:
            return v
    return None


def _reads_problems(plugin, settings, hparams, stage: _Stage) -> Iterator[str]:
    ignored = losses.ignored_fields(plugin)
    if not ignored:
        return
    ref = _loss_and_grad(plugin, settings, hparams, on_policy=False)
    for name in ignored:
        value = next(v for v in CHANGED[name] if v != settings.get(name))
        stage.what = f"{name} = {value!r}"
        moved = _moved(ref, _loss_and_grad(plugin, {**settings, name: value}, hparams, on_policy=False))
        if moved > TOL:
            fallback = ""
            if name == "epsilon" and "epsilon_high" in (plugin.reads or ()):
                fallback = " (inputs.epsilon_high is epsilon when epsilon_high is None, TRL's rule)"
            yield (
                f"loss {plugin.name!r} ({plugin.module}) declares reads={list(plugin.reads or ())}, but "
                f"setting {name} = {value!r} moves its loss or gradient by {moved:.2g} on an off-policy "
                f"synthetic batch{fallback}; add {name!r} to reads= in its register_loss, or stop reading it."
            )


def _off_policy_problems(plugin, settings, hparams, stage: _Stage) -> Iterator[str]:
    declared = [h for h in plugin.hyperparameters if h.off_policy_only]
    if not declared:
        return
    ref = _loss_and_grad(plugin, settings, hparams, on_policy=True)
    for h in declared:
        others = dict.fromkeys(
            v for v in (h.default, _other_value(h)) if v is not None and v != hparams[h.name]
        )
        for other in others:
            stage.what = f"{h.name} = {other!r}"
            moved = _moved(ref, _loss_and_grad(plugin, settings, {**hparams, h.name: other}, on_policy=True))
            if moved > TOL:
                yield (
                    f"loss {plugin.name!r} ({plugin.module}) declares hyperparameter {h.name!r} off_policy_only, "
                    f"but {h.name} = {other!r} instead of {hparams[h.name]!r} moves its loss or gradient by "
                    f"{moved:.2g} on an on-policy synthetic batch (every ratio 1); drop off_policy_only=True from it."
                )
                break


def _equivalent_gap(
    plugin: losses.LossPlugin, settings: Mapping[str, Any], hparams: Mapping[str, Any]
) -> float:
    """Max |gradient difference| between the plugin path and TRL's ``_compute_loss`` of
    ``plugin.on_policy_equivalent``, on-policy, both on the stand-in trainer with ``settings``."""
    from trl import GRPOTrainer

    from harness.losses.compute import plugin_loss
    from harness.losses.stand_in import LossProbe, make_loss_batch, trl_config_defaults

    known = trl_config_defaults()
    config = {k: v for k, v in settings.items() if k in known and k not in STAND_IN_SETS}
    grads = []
    for run in ("trl", "plugin"):
        batch = make_loss_batch(B, T, seed=3, lengths=[max(n, 1) for n in LENGTHS], on_policy=True)
        if config.get("beta"):
            noise = 0.2 * torch.randn(B, T, generator=torch.Generator().manual_seed(4))
            batch.inputs["ref_per_token_logps"] = batch.per_token_logps.detach() + noise
        loss_type = plugin.on_policy_equivalent if run == "trl" else plugin.trl_loss_type
        stand_in = LossProbe(loss_type, batch.per_token_logps, batch.entropies, **config)
        if run == "trl":
            loss = _seeded(GRPOTrainer._compute_loss, stand_in, None, batch.inputs)
        else:
            loss = _seeded(plugin_loss, stand_in, None, batch.inputs, plugin, hparams)
        (grad,) = torch.autograd.grad(loss, batch.per_token_logps, allow_unused=True)
        grads.append(torch.zeros_like(batch.per_token_logps) if grad is None else grad)
    return (grads[0] - grads[1]).abs().max().item()


def _equivalence(plugin, settings, hparams, defaults, stage: _Stage) -> tuple[list[str], bool]:
    """For an on-policy run: the error when the equivalence fails at TRL's and the plugin's
    defaults, and whether it holds at the run's settings."""
    if not plugin.on_policy_equivalent or not reuses_current_logps(settings):
        return [], False
    stage.what = f"TRL's {plugin.on_policy_equivalent} at the defaults"
    gap = _equivalent_gap(plugin, defaults, plugin.defaults())
    if gap > TOL:
        equivalent = plugin.on_policy_equivalent
        return [
            f"loss {plugin.name!r} ({plugin.module}) declares on_policy_equivalent={equivalent!r}, but on an "
            f"on-policy synthetic batch its gradient differs from TRL's {equivalent} by {gap:.2g} (TRL's and the "
            "plugin's defaults); name the TRL loss whose gradient it has when every ratio is 1 (its "
            "reduction's, for a plain policy gradient), or leave on_policy_equivalent None."
        ], False
    stage.what = f"TRL's {plugin.on_policy_equivalent} at the run's settings"
    return [], _equivalent_gap(plugin, settings, hparams) <= TOL


def _verdict(name: str, settings: Mapping[str, Any], hparams: Mapping[str, Any]) -> Verdict:
    plugin = losses.REGISTRY[name]
    defaults = {k: v for k, v in grpo_config_defaults().items() if k not in IRRELEVANT}
    stage = _Stage()
    try:
        problems = [*_reads_problems(plugin, settings, hparams, stage)]
        problems += _off_policy_problems(plugin, settings, hparams, stage)
        more, here = _equivalence(plugin, settings, hparams, defaults, stage)
    except losses.PluginError as e:
        return Verdict((f"{e} (found while checking its declarations, trying {stage.what})",), False)
    except Exception as e:
        where = f"loss {plugin.name!r} ({plugin.module}.{plugin.function.__qualname__})"
        return Verdict(
            (
                f"{where} raised {type(e).__name__}: {e}{losses._where(e)} while its declarations were checked "
                f"on a synthetic batch of B={B}, T={T}, trying {stage.what}; fix the function (or the "
                "declaration that made the harness try this).",
            ),
            False,
        )
    return Verdict(tuple(problems + more), here)


def check(name: str, config: Mapping[str, Any] | None, hparams: Mapping[str, Any] | None = None) -> Verdict:
    """The checks of the module docstring for the registered plugin ``name`` at a run's settings:
    ``config`` is the run's resolved ``GRPOConfig`` values (TRL's defaults when None), ``hparams``
    its hyperparameter values (the plugin's defaults when None). Memoised in memory."""
    plugin = losses.REGISTRY[name]
    settings = {**grpo_config_defaults(), **dict(config or {})}
    settings = {k: v for k, v in settings.items() if k not in IRRELEVANT}
    values = plugin.defaults() if hparams is None else {**plugin.defaults(), **dict(hparams)}
    function = f"{plugin.module}.{plugin.function.__qualname__}"
    return _check(json.dumps([name, function, settings, values], sort_keys=True, default=str))


@functools.lru_cache(maxsize=4096)
def _check(key: str) -> Verdict:
    name, _, settings, values = json.loads(key)
    return _verdict(name, settings, values)


def declaration_problems(name: str, config: Mapping[str, Any] | None = None, hparams=None) -> tuple[str, ...]:
    """The errors of :func:`check` (empty when the declarations hold or none is made)."""
    return check(name, config, hparams).problems
