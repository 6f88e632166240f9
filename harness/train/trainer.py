"""TRL's GRPOTrainer, observed: w_seq statistics, token counts and off-policy state per optimizer step.

The loss code stays TRL's (a loss plugin's run goes through :mod:`harness.losses.compute`, which
calls the same TRL methods around the plugin's formula). The subclass only wraps methods:

* ``_compute_loss``: while it runs, the log-probs that TRL's ``_get_per_token_logps_and_entropies``
  returns are kept (detached) and turned into per-completion ``log w_seq`` together with
  ``old_per_token_logps``, the mask and the advantages from the same inputs. No extra forward pass.
* ``training_step``: at each optimizer-step boundary (every ``current_gradient_accumulation_steps``
  micro-batches, TRL's own rule) the completions of the step are gathered from every rank, so the
  statistics cover every completion of the step, not an average of per-micro-batch statistics.
* ``_prepare_inputs`` / ``_generate_and_score_completions``: whether this micro-batch generated, how
  many micro-batches used the generation batch before it, and whether TRL handed the loss
  ``old_per_token_logps``. From what TRL did (not from its formula) each micro-batch gets a policy lag
  (optimizer updates between the policy whose log-probs are the ratio's denominator and the current
  one) and a reuse index (1-based pass over its generation batch).
"""

from __future__ import annotations

import numpy as np
import torch
from trl import GRPOTrainer

from harness import layout
from harness.train.wseq import sequence_log_ratios


class HarnessGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that records ``w_seq`` per completion and tokens generated / trained per step.

    After each optimizer step, :meth:`pop_step_records` returns the pooled arrays since the last call:
    ``log_w``, ``log_s``, ``advantages`` (each (N,) float64 over all ranks), ``n_masked``, the token
    counts and the step's off-policy state. Everything else behaves exactly as TRL's trainer.
    """

    #: A loss plugin (:class:`harness.losses.LossPlugin`) and its hyperparameters, set by
    #: :func:`harness.train.training.build_trainer` for a plugin run; None runs TRL's own loss.
    loss_plugin = None
    loss_hparams: dict = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._capture_logps = False
        self._captured_logps: torch.Tensor | None = None
        self._local_rows: list[torch.Tensor] = []  # (n, 5) float64: log_w, log_s, advantage, valid, real
        self._local_trained_tokens: torch.Tensor | int = 0
        self._local_generated_tokens = 0
        self._pooled: list[np.ndarray] = []  # (n, 3) float64 per optimizer step: log_w, log_s, advantage
        self._pooled_counts = np.zeros(3)  # completions masked, tokens trained, tokens generated
        # Off-policy state, plain Python values (no device work): set by the generation wrapper, read
        # by the _prepare_inputs wrapper, pooled per optimizer step. Same on every rank.
        self._generated_now = False
        self._generation_global_step = 0  # optimizer updates of the policy that generated the batch
        self._micro_batches_since_generation = 0  # 0 = the micro-batch that generated
        self._step_off_policy = self._pooled_off_policy = False
        self._step_policy_lag = self._pooled_policy_lag = 0
        self._step_reuse_index = self._pooled_reuse_index = 0

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture_logps:
            self._captured_logps = out[0].detach()
        return out

    def _loss(self, model, inputs):
        """TRL's ``_compute_loss``, or the plugin path (:func:`harness.losses.compute.plugin_loss`)."""
        if self.loss_plugin is None:
            return super()._compute_loss(model, inputs)
        from harness.losses.compute import plugin_loss

        return plugin_loss(self, model, inputs, self.loss_plugin, self.loss_hparams)

    def _compute_loss(self, model, inputs):
        if not self.model.training:
            return self._loss(model, inputs)
        self._capture_logps = True
        try:
            loss = self._loss(model, inputs)
        finally:
            self._capture_logps = False
        logps, self._captured_logps = self._captured_logps, None
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        log_w, log_s, valid = sequence_log_ratios(logps, inputs.get("old_per_token_logps"), mask)
        adv = inputs["advantages"]
        if adv.dim() > 1:  # subclasses may give (B, T) advantages; the sequence's sign is its first token's
            adv = adv[:, 0]
        # No host sync here (this runs every micro-batch): keep tensors, filter and count per step.
        real = torch.ones_like(log_w)
        self._local_rows.append(
            torch.stack([log_w, log_s, adv.detach().to(torch.float64), valid.to(torch.float64), real], dim=1)
        )
        self._local_trained_tokens = self._local_trained_tokens + mask.sum().to(torch.float64)
        return loss

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self._local_generated_tokens += int(out["completion_mask"].sum())
            self._generated_now = True
            self._generation_global_step = self.state.global_step
        return out

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        self._generated_now = False
        inputs = super()._prepare_inputs(generation_batch)
        if self._generated_now:
            self._micro_batches_since_generation = 0
        else:
            self._micro_batches_since_generation += 1
        # TRL's loss uses old_per_token_logps when it has them, else the detached current log-probs
        # (every ratio exactly 1, whatever policy generated): only the former can be off-policy.
        has_old = inputs.get("old_per_token_logps") is not None
        lag = self.state.global_step - self._generation_global_step if has_old else 0
        self._step_off_policy = self._step_off_policy or (has_old and lag > 0)
        self._step_policy_lag = max(self._step_policy_lag, lag)
        self._step_reuse_index = self._micro_batches_since_generation // self.args.steps_per_generation + 1
        return inputs

    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._step % self.current_gradient_accumulation_steps == 0:
            self._gather_step()
        return loss

    def _gather_step(self) -> None:
        """Pool this step's per-completion rows (columns: log_w, log_s, advantage, valid, real) over
        every micro-batch and rank; one host transfer per optimizer step, then numpy (a few small
        arrays: numpy's per-call cost is a fraction of torch's)."""
        device = self.accelerator.device
        local = (
            torch.cat(self._local_rows)
            if self._local_rows
            else torch.zeros((0, 5), dtype=torch.float64, device=device)
        )
        trained, generated = self._local_trained_tokens, float(self._local_generated_tokens)
        self._local_rows = []
        self._local_trained_tokens = 0
        self._local_generated_tokens = 0
        if self.accelerator.num_processes > 1:
            # Ranks may hold different numbers of rows: pad (real = 0), gather, drop the padding.
            trained = torch.as_tensor(trained, dtype=torch.float64, device=device).reshape(1)
            counts = torch.cat([trained, torch.tensor([generated], device=device, dtype=torch.float64)])
            local = self.accelerator.pad_across_processes(local, dim=0, pad_index=0)
            local = self.accelerator.gather(local)
            counts = self.accelerator.reduce(counts, reduction="sum").cpu().numpy()
        else:
            counts = np.array([float(trained), generated])
        rows = local.cpu().numpy()
        rows = rows[rows[:, 4] > 0]
        valid = rows[:, 3] > 0
        self._pooled.append(rows[valid, :3])
        self._pooled_counts += np.array([float((~valid).sum()), counts[0], counts[1]])
        self._pooled_off_policy = self._pooled_off_policy or self._step_off_policy
        self._pooled_policy_lag = max(self._pooled_policy_lag, self._step_policy_lag)
        self._pooled_reuse_index = self._step_reuse_index
        self._step_off_policy, self._step_policy_lag, self._step_reuse_index = False, 0, 0

    def pop_step_records(self) -> dict:
        """Pooled per-completion records since the last call (every rank holds the same).

        Returns:
            ``{"log_w": (N,), "log_s": (N,), "advantages": (N,), "n_masked": int,
            "tokens_trained": int, "tokens_generated": int}`` with float64 numpy arrays; token counts
            are completion tokens summed over ranks (trained counts each reuse of a generation batch).
        """
        rows = np.concatenate(self._pooled) if self._pooled else np.zeros((0, 3))
        masked, trained, generated = (int(x) for x in self._pooled_counts.tolist())
        self._pooled = []
        self._pooled_counts = np.zeros(3)
        off_policy, lag, reuse = self._pooled_off_policy, self._pooled_policy_lag, self._pooled_reuse_index
        self._pooled_off_policy, self._pooled_policy_lag, self._pooled_reuse_index = False, 0, 0
        return {
            "log_w": rows[:, 0],
            "log_s": rows[:, 1],
            "advantages": rows[:, 2],
            "n_masked": masked,
            layout.TOKENS_TRAINED: trained,
            layout.TOKENS_GENERATED: generated,
            layout.OFF_POLICY: float(off_policy),
            layout.POLICY_LAG: float(lag),
            layout.REUSE_INDEX: float(reuse),
        }
