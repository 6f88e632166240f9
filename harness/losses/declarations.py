"""Checking what a loss plugin declares about itself, on synthetic batches, before anything runs.

A plugin may declare (:func:`harness.losses.register_loss`):

* ``reads``: which of :data:`harness.losses.LOSS_FIELDS` its function reads. Each field it does not
  list is changed in turn (``epsilon`` 0.2 -> 0.05, ``epsilon_high`` None -> 0.5, ``delta``
  None -> 1.1, ``importance_sampling_level`` token -> sequence) on an off-policy batch: its masked
  loss and the gradient of their sum into ``per_token_logps`` must not move.
* ``off_policy_only`` on a hyperparameter: on an on-policy batch (old log-probs = the detached
  current ones, every ratio exactly 1) another allowed value must leave loss and gradient as they are.
* ``on_policy_equivalent``: on an on-policy batch the plugin path
  (:func:`harness.losses.compute.plugin_loss`) and TRL's own ``GRPOTrainer._compute_loss`` for that
  loss type (both on the bench's stand-in trainer, :class:`harness.bench.probe.LossProbe`) give the
  same gradient into ``per_token_logps``.

A declaration that one of these falsifies would make validation's warnings ("has no effect",
"these runs are grpo runs") false, so it is an error naming the fix. Passing is evidence, not
proof: a branch the synthetic batches do not reach is not seen. Tolerance :data:`TOL` (absolute,
float32, values of order 1).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from types import MappingProxyType, SimpleNamespace
from typing import Any

import torch

from harness import losses
from harness.losses.compute import LossInputs, ReadOnlyConfig, check_output

TOL = 1e-6
#: For each field of LOSS_FIELDS: the changed value tried when a plugin declares it does not read it.
CHANGED = {"epsilon": 0.05, "epsilon_high": 0.5, "delta": 1.1, "importance_sampling_level": "sequence"}


def _inputs(settings: Mapping[str, Any], hparams: Mapping[str, Any], on_policy: bool) -> LossInputs:
    """A seeded batch, B=4 completions x T=5 tokens, one row empty; old log-probs drift by
    N(0, 0.3) nats per token off-policy and equal the current ones (detached) on-policy."""
    gen = torch.Generator().manual_seed(0)
    logps = (-3.0 * torch.rand(4, 5, generator=gen)).requires_grad_(True)
    drift = 0.3 * torch.randn(4, 5, generator=gen)
    old = logps.detach() if on_policy else logps.detach() + drift
    mask = torch.tensor(
        [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.int32
    )
    log_ratio = logps - old
    weights = log_ratio
    if settings.get("importance_sampling_level") == "sequence":
        weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    epsilon, high = settings.get("epsilon", 0.2), settings.get("epsilon_high")
    ref = logps.detach() + 0.05 if settings.get("beta") else None
    return LossInputs(
        logps, old, ref, torch.tensor([[1.2], [-0.7], [0.4], [0.9]]), mask, log_ratio, weights, None,
        2.0 * torch.rand(4, 5, generator=gen), epsilon, epsilon if high is None else high,
        ReadOnlyConfig(SimpleNamespace(**settings)), MappingProxyType(dict(hparams)),
    )  # fmt: skip


def _loss_and_grad(
    plugin: losses.LossPlugin, settings: Mapping[str, Any], hparams: Mapping[str, Any], on_policy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The plugin's loss on the batch's unmasked tokens (B, T), and the gradient of their sum into
    ``per_token_logps`` (B, T)."""
    batch = _inputs(settings, hparams, on_policy)
    out = check_output(plugin, plugin.function(batch), batch)
    masked = out.loss.expand_as(batch.mask) * batch.mask
    (grad,) = torch.autograd.grad(masked.sum(), batch.per_token_logps, allow_unused=True)
    grad = torch.zeros_like(batch.per_token_logps) if grad is None else grad
    return masked.detach(), grad


def _moved(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def _other_value(h: losses.Hyperparameter) -> Any:
    """An allowed value of ``h`` other than its default, or None when there is none to try."""
    if h.choices:
        return next((c for c in h.choices if c != h.default), None)
    if h.type is bool:
        return not h.default
    if h.type is str:
        return None
    d = h.default
    for v in (d * 2, d / 2, d + 1, d - 1, d + 0.5, d - 0.5, d + 0.01, d - 0.01):
        v = h.type(v) if h.type is int else float(v)
        if v != d and h.problem(v) is None:
            return v
    return None


def _reads_problems(
    plugin: losses.LossPlugin, base: Mapping[str, Any], hparams: Mapping[str, Any]
) -> list[str]:
    ref = _loss_and_grad(plugin, base, hparams, on_policy=False)
    out = []
    for name in losses.ignored_fields(plugin):
        changed = _loss_and_grad(plugin, {**base, name: CHANGED[name]}, hparams, on_policy=False)
        moved = _moved(ref, changed)
        if moved > TOL:
            out.append(
                f"loss {plugin.name!r} ({plugin.module}) declares reads={list(plugin.reads or ())}, but "
                f"setting {name} = {CHANGED[name]!r} moves its loss or gradient by {moved:.2g} on an "
                f"off-policy synthetic batch; add {name!r} to reads= in its register_loss, or stop reading it."
            )
    return out


def _off_policy_problems(
    plugin: losses.LossPlugin, base: Mapping[str, Any], hparams: Mapping[str, Any]
) -> list[str]:
    if not any(h.off_policy_only for h in plugin.hyperparameters):
        return []
    ref = _loss_and_grad(plugin, base, hparams, on_policy=True)
    out = []
    for h in plugin.hyperparameters:
        other = _other_value(h) if h.off_policy_only else None
        if other is None:
            continue
        moved = _moved(ref, _loss_and_grad(plugin, base, {**hparams, h.name: other}, on_policy=True))
        if moved > TOL:
            out.append(
                f"loss {plugin.name!r} ({plugin.module}) declares hyperparameter {h.name!r} off_policy_only, "
                f"but {h.name} = {other!r} instead of {h.default!r} moves its loss or gradient by {moved:.2g} "
                "on an on-policy synthetic batch (every ratio 1); drop off_policy_only=True from it."
            )
    return out


def _at(hparams: Mapping[str, Any]) -> str:
    return " with " + ", ".join(f"{k} = {v!r}" for k, v in hparams.items()) if hparams else ""


def _equivalent_problem(plugin: losses.LossPlugin, hparams: Mapping[str, Any]) -> str | None:
    """The plugin path against TRL's ``_compute_loss`` of ``plugin.on_policy_equivalent``, on-policy."""
    from trl import GRPOTrainer

    from harness.bench.probe import LossProbe, make_loss_batch
    from harness.losses.compute import plugin_loss

    equivalent = plugin.on_policy_equivalent
    grads = []
    for run in ("trl", "plugin"):
        batch = make_loss_batch(6, 7, seed=3, lengths=[7, 5, 3, 1, 6, 2], on_policy=True)
        loss_type = equivalent if run == "trl" else plugin.trl_loss_type
        stand_in = LossProbe(loss_type, batch.per_token_logps, batch.entropies)
        if run == "trl":
            loss = GRPOTrainer._compute_loss(stand_in, None, batch.inputs)
        else:
            loss = plugin_loss(stand_in, None, batch.inputs, plugin, hparams)
        (grad,) = torch.autograd.grad(loss, batch.per_token_logps, allow_unused=True)
        grads.append(torch.zeros_like(batch.per_token_logps) if grad is None else grad)
    moved = (grads[0] - grads[1]).abs().max().item()
    if moved <= TOL:
        return None
    return (
        f"loss {plugin.name!r} ({plugin.module}) declares on_policy_equivalent={equivalent!r}, but{_at(hparams)} on "
        f"an on-policy synthetic batch its gradient differs from TRL's {equivalent} by {moved:.2g}; name the "
        "TRL loss whose gradient it has when every ratio is 1 (its reduction's, for a plain policy "
        "gradient), or leave on_policy_equivalent None."
    )


def declaration_problems(name: str, hparams: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """What falsifies the declarations of the registered plugin ``name`` (module docstring) with
    hyperparameter values ``hparams`` (its defaults when None: a run's values, since a declaration
    must hold for every run it is applied to), each with its fix; empty when nothing does or
    nothing is declared. Memoised per (name, values): a few ms per check, but the first
    ``on_policy_equivalent`` check imports TRL's ``GRPOTrainer`` (seconds)."""
    values = losses.REGISTRY[name].defaults() if hparams is None else dict(hparams)
    return _declaration_problems(name, json.dumps(values, sort_keys=True))


@functools.lru_cache(maxsize=256)
def _declaration_problems(name: str, hparams_json: str) -> tuple[str, ...]:
    from harness.trl_boundary import grpo_config_defaults

    plugin = losses.REGISTRY[name]
    base = {**grpo_config_defaults(), "beta": 0.0}
    hparams = json.loads(hparams_json)
    where = f"loss {plugin.name!r} ({plugin.module}.{plugin.function.__qualname__})"
    try:
        out = _reads_problems(plugin, base, hparams) + _off_policy_problems(plugin, base, hparams)
        problem = _equivalent_problem(plugin, hparams) if plugin.on_policy_equivalent else None
    except losses.PluginError as e:
        return (f"{e} (found while checking its declarations on a synthetic batch)",)
    except Exception as e:
        return (
            f"{where} raised {type(e).__name__}: {e}{losses._where(e)} while its declarations were checked "
            "on a synthetic batch; fix the function.",
        )
    return tuple(out + ([problem] if problem else []))
