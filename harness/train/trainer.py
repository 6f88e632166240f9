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
* ``_generate_single_turn``: the completion tokens generated (every completion, whatever happens
  to it next), and, with dynamic sampling, the completions to hand TRL again.

Dynamic sampling (the grid's ``dynamic_sampling`` section, :mod:`harness.train.dynamic_sampling`)
wraps ``_generate_and_score_completions``: it generates the sampler's batch with TRL's
``_generate`` and scores it with TRL's ``_calculate_rewards`` (rewards gathered from every rank,
so every rank keeps the same groups), drops the groups whose metric is all equal, generates
further batches of prompts drawn from the training split until the batch is full or
``max_gen_batches`` are spent, and then hands the kept rows, with the completions already
generated for them, to TRL's own ``_generate_and_score_completions`` once: TRL computes the old
and reference log-probs, the rewards, the advantages and every metric of the step over exactly
the batch it trains on. What the rounds logged is taken back, so TRL's metrics describe the
trained batch; the harness's ``dynamic_sampling/*`` columns describe everything generated.
"""

from __future__ import annotations

import numpy as np
import torch
from trl import GRPOTrainer

from harness import layout
from harness.train import dynamic_sampling as ds
from harness.train.wseq import sequence_log_ratios

#: The per-step counts of dynamic sampling, summed over the step's generations (0 without one).
DS_COUNTS = (
    layout.DS_GROUPS_DRAWN,
    layout.DS_GROUPS_KEPT,
    layout.DS_GROUPS_TRAINED,
    layout.DS_GEN_BATCHES,
    layout.DS_COMPLETIONS_GENERATED,
    layout.DS_SHORT,
)


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
    #: :class:`harness.settings.schema.DynamicSamplingSettings` of a run that enables it, else None;
    #: set by :func:`harness.train.training.build_trainer`.
    dynamic_sampling = None
    #: Where rank 0 writes every group dynamic sampling generated (``dynamic_sampling.jsonl``), or None.
    dynamic_sampling_log = None

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
        # Dynamic sampling: the completions (and vLLM's log-probs) to hand TRL again, per local row,
        # and the step's counts and generated rewards (the same on every rank).
        self._replay: tuple[list, list | None] | None = None
        self._ds_counts = dict.fromkeys(DS_COUNTS, 0.0)
        self._ds_rewards: list[np.ndarray] = []

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

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        if self._replay is not None:
            completion_ids, logprobs = self._replay
            self._replay = None
            return completion_ids, logprobs
        completion_ids, logprobs = super()._generate_single_turn(
            prompt_ids, images, multimodal_fields, num_generations, **kwargs
        )
        if self.model.training:
            self._local_generated_tokens += sum(len(ids) for ids in completion_ids)
        return completion_ids, logprobs

    def _generate_and_score_completions(self, inputs):
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if self.dynamic_sampling is None:
            out = super()._generate_and_score_completions(inputs)
        else:
            out = super()._generate_and_score_completions(self._dynamic_batch(inputs))
        self._generated_now = True
        self._generation_global_step = self.state.global_step
        return out

    # --- dynamic sampling -----------------------------------------------------------------------

    def _dynamic_batch(self, inputs: list[dict]) -> list[dict]:
        """The local rows this generation trains on, their completions set aside for TRL's
        ``_generate`` to return (:meth:`_generate_single_turn`); the step's counts recorded."""
        settings, g = self.dynamic_sampling, self.num_generations
        saved = self._metrics_snapshot()
        rounds: list[dict] = []
        batch = inputs
        target = len(inputs) * self.accelerator.num_processes
        while True:
            got = self._generate_round(batch)
            got["keep"] = ds.kept_groups(got["metric"], g)
            rounds.append(got)
            kept = sum(int(r["keep"].sum()) for r in rounds)
            if kept * g >= target or len(rounds) >= settings.max_gen_batches:
                break
            batch = self._further_rows(len(rounds), len(inputs))
        self._metrics_restore(saved)
        unit = self.accelerator.num_processes * self.args.steps_per_generation
        chosen = ds.rows_to_train(np.concatenate([r["keep"] for r in rounds]), g, target, unit)
        self._ranks_agree(chosen.rows)
        rows, completions, logprobs = ([x for r in rounds for x in r[k]] for k in ("rows", "ids", "logprobs"))
        self._count_generation(chosen, len(rounds), len(rows) // g)
        self._log_groups(rounds, chosen)
        share = chosen.rows.size // self.accelerator.num_processes
        mine = chosen.rows[
            self.accelerator.process_index * share : (self.accelerator.process_index + 1) * share
        ]
        self._replay = (
            [completions[i] for i in mine],
            None if logprobs[0] is None else [logprobs[i] for i in mine],
        )
        return [rows[i] for i in mine]

    def _generate_round(self, batch: list[dict]) -> dict:
        """Generate and score one batch of local rows with TRL's own ``_generate`` and
        ``_calculate_rewards``. Returns every rank's ``rows``, completion ``ids``, ``texts``, vLLM
        ``logprobs`` (None each without vLLM), TRL's ``reward`` and the filter's ``metric`` per
        row, in the ranks' order (the same on every rank)."""
        from accelerate.utils import gather_object

        prompts = [x["prompt"] for x in batch]
        prompt_ids, completion_ids, tool_mask, texts, logprobs, extra, _, _ = self._generate(prompts)
        if tool_mask is not None or extra:
            raise NotImplementedError(
                "dynamic sampling hands TRL plain completions: no tools, no rollout_func"
            )
        rewards = self._calculate_rewards(batch, prompts, texts, completion_ids)  # gathered: (N, funcs)
        weighted = self._weighted_rewards(rewards)
        self._ds_rewards.append(weighted)
        local = list(zip(batch, completion_ids, texts, logprobs or [None] * len(batch), strict=True))
        every = gather_object(local) if self.accelerator.num_processes > 1 else local
        rows, ids, texts, logprobs = (list(column) for column in zip(*every, strict=True))
        return {
            "rows": rows,
            "ids": ids,
            "texts": texts,
            "logprobs": logprobs,
            "reward": weighted,
            "metric": self._filter_values(rewards),
        }

    def _ranks_agree(self, rows: np.ndarray) -> None:
        """Every rank chose the same rows to train on (they filter the same gathered rewards; a
        rank that chose others would train on groups the rest dropped).

        Raises:
            RuntimeError: the ranks disagree.
        """
        if self.accelerator.num_processes == 1:
            return
        from accelerate.utils import gather_object

        chosen = gather_object([rows.tolist()])
        if any(c != chosen[0] for c in chosen):
            raise RuntimeError(f"dynamic sampling: the ranks chose different rows to train on: {chosen}")

    def _log_groups(self, rounds: list[dict], chosen: ds.TrainedRows) -> None:
        """One line per generated group in ``dynamic_sampling.jsonl`` (rank 0): the optimizer step
        it feeds, its generation batch, prompt, completions, TRL's rewards, the filter's metric,
        whether it was kept and whether it was trained on."""
        if self.dynamic_sampling_log is None or not self.accelerator.is_main_process:
            return
        import json

        from harness.train.recorder import plain_json

        g, trained = self.num_generations, set((chosen.rows // self.num_generations).tolist())
        lines, index = [], 0
        for number, r in enumerate(rounds, start=1):
            for start in range(0, len(r["rows"]), g):
                record = {
                    "step": self.state.global_step + 1,
                    "gen_batch": number,
                    "prompt": plain_json(r["rows"][start]["prompt"]),
                    "completions": plain_json(r["texts"][start : start + g]),
                    "rewards": [float(x) for x in r["reward"][start : start + g]],
                    "metric": [float(x) for x in r["metric"][start : start + g]],
                    "kept": bool(r["keep"][start // g]),
                    "trained": index in trained,
                }
                lines.append(json.dumps(record) + "\n")
                index += 1
        with open(self.dynamic_sampling_log, "a") as f:
            f.writelines(lines)

    def _weighted_rewards(self, rewards: torch.Tensor) -> np.ndarray:
        """TRL's reward of each completion (the weighted sum of the reward functions; NaN where
        every function returned None), as TRL logs ``reward``."""
        weighted = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        weighted[torch.isnan(rewards).all(dim=1)] = torch.nan
        return weighted.double().cpu().numpy()

    def _filter_values(self, rewards: torch.Tensor) -> np.ndarray:
        """The filter's metric per completion: TRL's reward, or one reward function's values."""
        metric = self.dynamic_sampling.metric
        if metric in self.reward_func_names:
            return rewards[:, self.reward_func_names.index(metric)].double().cpu().numpy()
        return self._weighted_rewards(rewards)

    def _further_rows(self, round_: int, local_rows: int) -> list[dict]:
        """This rank's rows of further generation batch ``round_``: prompts of the training split
        (:func:`harness.train.dynamic_sampling.further_prompts`), each ``num_generations`` times."""
        g, n = self.num_generations, self.accelerator.num_processes
        micro = self._step % self.current_gradient_accumulation_steps
        index = ds.further_prompts(
            self.args.seed,
            self.state.global_step,
            micro,
            round_,
            local_rows * n // g,
            len(self.train_dataset),
        )
        every = [self.train_dataset[int(i)] for i in index for _ in range(g)]
        start = self.accelerator.process_index * local_rows
        return every[start : start + local_rows]

    def _count_generation(self, chosen: ds.TrainedRows, rounds: int, drawn: int) -> None:
        counts = self._ds_counts
        counts[layout.DS_GROUPS_DRAWN] += drawn
        counts[layout.DS_GROUPS_KEPT] += chosen.groups_kept
        counts[layout.DS_GROUPS_TRAINED] += chosen.rows.size // self.num_generations
        counts[layout.DS_GEN_BATCHES] += rounds
        counts[layout.DS_COMPLETIONS_GENERATED] += drawn * self.num_generations
        counts[layout.DS_SHORT] = max(counts[layout.DS_SHORT], float(chosen.short))

    def _metrics_snapshot(self) -> tuple:
        """What the rounds' calls into TRL add to its step metrics and logs, to take it back."""
        metrics = {k: list(v) for k, v in self._metrics["train"].items()}
        pending = {k: list(v) for k, v in self._pending_metrics.items()}
        extra = {k: list(v) for k, v in self._pending_extra_logs.items()}
        return metrics, pending, extra, self.state.num_input_tokens_seen

    def _metrics_restore(self, saved: tuple) -> None:
        metrics, pending, extra, seen = saved
        for target, old in ((self._metrics["train"], metrics), (self._pending_metrics, pending)):
            target.clear()
            target.update(old)
        self._pending_extra_logs.clear()
        self._pending_extra_logs.update(extra)
        self.state.num_input_tokens_seen = seen

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
            are completion tokens summed over ranks (trained counts each reuse of a generation batch;
            generated counts every completion generated, whether dynamic sampling kept it or not).
            With dynamic sampling also the ``dynamic_sampling/*`` counts of the step (:data:`DS_COUNTS`,
            summed over its generations; ``short`` 1.0 when one ran short) and the mean reward over
            every completion generated (``dynamic_sampling/reward_generated``, NaN without one).
        """
        rows = np.concatenate(self._pooled) if self._pooled else np.zeros((0, 3))
        masked, trained, generated = (int(x) for x in self._pooled_counts.tolist())
        self._pooled = []
        self._pooled_counts = np.zeros(3)
        off_policy, lag, reuse = self._pooled_off_policy, self._pooled_policy_lag, self._pooled_reuse_index
        self._pooled_off_policy, self._pooled_policy_lag, self._pooled_reuse_index = False, 0, 0
        sampling = {}
        if self.dynamic_sampling is not None:
            rewards = np.concatenate(self._ds_rewards) if self._ds_rewards else np.zeros(0)
            finite = rewards[~np.isnan(rewards)]
            sampling = {
                **self._ds_counts,
                layout.DS_REWARD_GENERATED: float(finite.mean()) if finite.size else float("nan"),
            }
            self._ds_counts = dict.fromkeys(DS_COUNTS, 0.0)
            self._ds_rewards = []
        return {
            **sampling,
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
