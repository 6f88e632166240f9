"""Pin how the installed TRL reduces per-token losses to a scalar, for every loss type.

The case: two completions of lengths 3 and 5 in a batch padded to T = 5, ``max_completion_length=10``,
per-token loss 1 everywhere in the first and 3 everywhere in the second (token sum 18 over 8 tokens).
Every value below is computed by TRL's own ``GRPOTrainer._compute_loss`` through the stand-in of
``harness.losses.stand_in``, never re-implemented, so a TRL release that changes a reduction fails here.

How the per-token loss is made exactly 1 and 3:

- clipped-ratio losses (grpo, bnpo, dr_grpo, dapo, luspo, gspo): on policy (no ``old_per_token_logps``,
  so TRL uses ``per_token_logps.detach()`` and the ratio is exactly 1), advantages -1 and -3: the loss
  ``-min(r A, clip(r) A)`` is then ``-A``;
- cispo: ``-min(r, epsilon_high) A log p``; with r = 1, ``epsilon_high=5`` (ScaleRL), ``log p = -1`` and
  advantages 1 and 3 it is ``A``;
- sapo: ``-(4 / tau) sigmoid(tau (r - 1)) A`` = ``-2 A / tau`` at r = 1; with both temperatures 1 and
  advantages -1/2 and -3/2 it is ``-2 A``;
- vespo: ``-phi(w) A log p``; on policy ``w = 1`` so ``phi = 1``; with ``log p = -1`` and advantages 1
  and 3 it is ``A``.
"""

from __future__ import annotations

import pytest
import torch

from harness.bench.probe import make_loss_stand_in
from harness.losses.stand_in import LossBatch, make_loss_batch

LENGTHS = [3, 5]
MAX_COMPLETION_LENGTH = 10
NUM_ITEMS = 8.0  # completion tokens in the (single) generation batch


def two_completions(advantages: list[float], logps_value: float = -1.0) -> LossBatch:
    batch = make_loss_batch(
        2, 5, lengths=LENGTHS, advantages=advantages, logps_value=logps_value, on_policy=True, seed=0
    )
    batch.inputs["num_items_in_batch"] = torch.tensor(NUM_ITEMS)
    return batch


def trl_loss(variant: str, batch: LossBatch, **overrides) -> float:
    settings = {
        "max_completion_length": MAX_COMPLETION_LENGTH,
        "gradient_accumulation_steps": 1,
        "training": True,
    }
    settings.update(overrides)
    probe = make_loss_stand_in(variant, batch, **settings)
    return probe.loss(batch.inputs).detach().item()


CLIPPED_ADVANTAGES = [-1.0, -3.0]


def test_setup_gives_per_token_loss_one_and_three() -> None:
    batch = two_completions(CLIPPED_ADVANTAGES)
    assert batch.inputs["completion_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert "old_per_token_logps" not in batch.inputs  # on policy: ratio exactly 1
    # grpo on one completion at a time is the token mean, i.e. the per-token loss itself
    for row, expected in ((0, 1.0), (1, 3.0)):
        single = make_loss_batch(
            1, 5, lengths=[LENGTHS[row]], advantages=[CLIPPED_ADVANTAGES[row]], on_policy=True
        )
        assert trl_loss("grpo", single) == pytest.approx(expected, abs=1e-6)


def test_grpo_is_mean_over_sequences_of_token_means() -> None:
    # (3*1/3 + 5*3/5) / 2
    assert trl_loss("grpo", two_completions(CLIPPED_ADVANTAGES)) == pytest.approx(2.0, abs=1e-6)


def test_bnpo_is_token_sum_over_token_count() -> None:
    # 18 / 8, one process, no accumulation
    assert trl_loss("bnpo", two_completions(CLIPPED_ADVANTAGES)) == pytest.approx(2.25, abs=1e-6)


def test_dr_grpo_is_token_sum_over_batch_times_max_completion_length() -> None:
    # 18 / (2 * 10)
    assert trl_loss("dr_grpo", two_completions(CLIPPED_ADVANTAGES)) == pytest.approx(0.9, abs=1e-6)


def test_dapo_is_token_sum_over_num_items_in_batch() -> None:
    # 18 / num_items_in_batch (8)
    assert trl_loss("dapo", two_completions(CLIPPED_ADVANTAGES)) == pytest.approx(2.25, abs=1e-6)


def test_dapo_uses_num_items_in_batch_not_the_local_token_count() -> None:
    batch = two_completions(CLIPPED_ADVANTAGES)
    batch.inputs["num_items_in_batch"] = torch.tensor(12.0)  # e.g. the other micro-batches' tokens included
    assert trl_loss("dapo", batch) == pytest.approx(1.5, abs=1e-6)


def test_luspo_is_mean_over_sequences_of_token_sums() -> None:
    # (3 + 15) / 2
    assert trl_loss("luspo", two_completions(CLIPPED_ADVANTAGES)) == pytest.approx(9.0, abs=1e-6)


def test_gspo_reduces_like_grpo() -> None:
    assert trl_loss("gspo", two_completions(CLIPPED_ADVANTAGES)) == pytest.approx(2.0, abs=1e-6)


def test_cispo_reduces_like_dapo() -> None:
    batch = two_completions([1.0, 3.0], logps_value=-1.0)
    assert trl_loss("cispo", batch, epsilon_high=5.0) == pytest.approx(2.25, abs=1e-6)


def test_sapo_reduces_like_grpo() -> None:
    batch = two_completions([-0.5, -1.5])
    value = trl_loss("sapo", batch, sapo_temperature_pos=1.0, sapo_temperature_neg=1.0)
    assert value == pytest.approx(2.0, abs=1e-6)


def test_vespo_reduces_like_dapo() -> None:
    batch = two_completions([1.0, 3.0], logps_value=-1.0)
    assert trl_loss("vespo", batch) == pytest.approx(2.25, abs=1e-6)


# Gradient accumulation: TRL divides by current_gradient_accumulation_steps in train mode only, except
# dapo/cispo/vespo, whose normaliser is num_items_in_batch * accumulation steps / steps_per_generation.
@pytest.mark.parametrize(
    ("variant", "train_value", "eval_value"),
    [
        ("grpo", 1.0, 2.0),
        ("bnpo", 1.125, 2.25),
        ("dr_grpo", 0.45, 0.9),
        ("luspo", 4.5, 9.0),
        ("dapo", 2.25, 2.25),
    ],
)
def test_accumulation_normaliser(variant: str, train_value: float, eval_value: float) -> None:
    batch = two_completions(CLIPPED_ADVANTAGES)
    accumulation = {"gradient_accumulation_steps": 2, "steps_per_generation": 2}
    assert trl_loss(variant, batch, training=True, **accumulation) == pytest.approx(train_value, abs=1e-6)
    assert trl_loss(variant, batch, training=False, **accumulation) == pytest.approx(eval_value, abs=1e-6)


def test_dapo_eval_mode_ignores_steps_per_generation() -> None:
    batch = two_completions(CLIPPED_ADVANTAGES)
    settings = {"gradient_accumulation_steps": 1, "steps_per_generation": 4}
    assert trl_loss("dapo", batch, training=True, **settings) == pytest.approx(9.0, abs=1e-6)
    assert trl_loss("dapo", batch, training=False, **settings) == pytest.approx(2.25, abs=1e-6)
