"""w_seq statistics against values computed by hand."""

import math

import numpy as np
import pytest
import torch

from harness.layout import WSEQ_COLUMNS
from harness.train.wseq import sequence_log_ratios, wseq_stats


def test_sequence_log_ratios_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0], [-1.0, -1.0, -1.0]])
    old = torch.tensor([[-1.5, -2.0, -2.0], [-1.0, -1.0, 5.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    log_w, log_s, valid = sequence_log_ratios(logp, old, mask)
    # row 0: 0.5 + 0 - 1 = -0.5 over 3 tokens; row 1: 0.5 + 0.5 (third token masked) over 2.
    assert log_w.dtype == torch.float64
    assert log_w.tolist() == pytest.approx([-0.5, 1.0, 0.0])
    assert log_s.tolist() == pytest.approx([-0.5 / 3, 0.5, 0.0])
    assert valid.tolist() == [True, True, False]


def test_on_policy_is_exactly_one():
    logp = torch.randn(4, 5)
    log_w, log_s, _ = sequence_log_ratios(logp, None, torch.ones(4, 5))
    assert (log_w == 0).all() and (log_s == 0).all()
    # TRL's on-policy path: old = current.detach(), the difference is exactly zero too
    log_w2, _, _ = sequence_log_ratios(logp, logp.detach(), torch.ones(4, 5))
    assert (log_w2 == 0).all()


def test_padding_garbage_is_ignored():
    logp = torch.tensor([[-1.0, float("-inf")]])
    old = torch.tensor([[-2.0, float("-inf")]])
    log_w, _, _ = sequence_log_ratios(logp, old, torch.tensor([[1, 0]]))
    assert log_w.tolist() == [1.0]


def test_stats_by_hand():
    log_w = np.log([1.0, 2.0, 4.0])
    log_s = np.log([1.0, 1.5, 2.0])
    adv = np.array([1.0, -1.0, 0.0])  # 0 counts as positive (VESPO's split)
    s = wseq_stats(log_w, log_s, adv, n_masked=2)
    assert set(s) == set(WSEQ_COLUMNS)
    mean = 7 / 3
    assert s["w_seq/mean"] == pytest.approx(mean)
    assert s["w_seq/std"] == pytest.approx(
        math.sqrt(((1 - mean) ** 2 + (2 - mean) ** 2 + (4 - mean) ** 2) / 3)
    )
    assert (s["w_seq/min"], s["w_seq/max"]) == pytest.approx((1.0, 4.0))
    assert s["w_seq/p50"] == pytest.approx(2.0)
    # quantile of log w at 0.05 over 3 points: 0.1 of the way from log 1 to log 2
    assert s["w_seq/p05"] == pytest.approx(2**0.1)
    assert s["w_seq/p95"] == pytest.approx(2 * 2**0.9)
    assert s["w_seq/mean_adv_pos"] == pytest.approx(2.5)
    assert s["w_seq/mean_adv_neg"] == pytest.approx(2.0)
    assert (s["w_seq/n_adv_pos"], s["w_seq/n_adv_neg"]) == (2.0, 1.0)
    assert (s["w_seq/n"], s["w_seq/n_masked"], s["w_seq/n_inf"]) == (3.0, 2.0, 0.0)
    assert s["log_w_seq/mean"] == pytest.approx(np.log(8) / 3)
    assert (s["log_w_seq/min"], s["log_w_seq/max"]) == pytest.approx((0.0, np.log(4)))
    assert s["s_seq/mean"] == pytest.approx(1.5)
    assert (s["s_seq/min"], s["s_seq/max"]) == pytest.approx((1.0, 2.0))


def test_extreme_ratios_are_inf_and_counted():
    log_w = np.array([0.0, 1000.0, -1000.0, np.log(2)])
    s = wseq_stats(log_w, log_w / 100, np.ones(4))
    assert s["w_seq/n_inf"] == 1.0
    assert s["w_seq/max"] == math.inf and s["w_seq/mean"] == math.inf
    assert s["w_seq/min"] == 0.0  # exp(-1000) underflows to 0 in float64, no clamp
    assert s["log_w_seq/max"] == 1000.0  # the log stays exact
    # median of log w over [-1000, 0, log 2, 1000] is log(2) / 2
    assert s["w_seq/p50"] == pytest.approx(math.sqrt(2))


def test_empty_step():
    s = wseq_stats(np.array([]), np.array([]), np.array([]), n_masked=3)
    assert s["w_seq/n"] == 0.0 and s["w_seq/n_masked"] == 3.0 and s["w_seq/n_inf"] == 0.0
    assert math.isnan(s["w_seq/mean"])
