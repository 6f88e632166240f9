"""The pass@k estimator (harness.models.passk) against Chen et al.'s definition, 1 - C(n-c, k)/C(n, k)
(arXiv:2107.03374, Eq. 1), computed exactly with integer binomials, and against hand-computed values."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy.special import comb

from harness.models.passk import ks_for, pass_at_k, summarise


def exact(n: int, c: int, k: int) -> float:
    """1 - C(n - c, k) / C(n, k) in rationals (scipy's exact integer binomials; C(m, k) = 0 for m < k)."""
    return float(1 - Fraction(int(comb(n - c, k, exact=True)), int(comb(n, k, exact=True))))


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (5, 2, 1, 2 / 5),  # pass@1 is the share of correct samples
        (10, 1, 1, 1 / 10),
        (10, 1, 10, 1.0),  # all ten drawn: the correct one among them
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
        (6, 3, 4, 1.0),  # n - c = 3 < k = 4: every draw of four holds a correct one
        (6, 1, 3, 1 - 10 / 20),  # 1 - C(5,3)/C(6,3)
        (8, 3, 2, 1 - 10 / 28),  # 1 - C(5,2)/C(8,2)
    ],
)
def test_hand_computed_values(n, c, k, expected):
    (value,) = pass_at_k(n, [c], k)
    assert value == pytest.approx(expected, abs=1e-15)


def test_random_counts_match_the_exact_binomial_form():
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(1, 200))
        c = int(rng.integers(0, n + 1))
        k = int(rng.integers(1, n + 1))
        (value,) = pass_at_k(n, [c], k)
        assert value == pytest.approx(exact(n, c, k), rel=1e-12, abs=1e-12), (n, c, k)


def test_large_n_stays_finite_where_the_binomials_overflow_floats():
    n, c, k = 2000, 5, 700  # C(2000, 700) ~ 1e570, past float64
    assert not np.isfinite(comb(n, k))
    (value,) = pass_at_k(n, [c], k)
    assert value == pytest.approx(exact(n, c, k), rel=1e-12)


def test_one_value_per_prompt_and_n_per_prompt():
    values = pass_at_k([4, 8, 2], [1, 0, 2], 2)
    assert values.shape == (3,)
    assert values.tolist() == pytest.approx([exact(4, 1, 2), 0.0, 1.0])
    assert pass_at_k(4, [0, 1, 2, 3, 4], 1).tolist() == pytest.approx([0, 0.25, 0.5, 0.75, 1])


def test_pass_at_k_grows_with_k():
    for n, c in [(16, 1), (16, 5), (9, 2)]:
        values = [pass_at_k(n, [c], k)[0] for k in range(1, n + 1)]
        assert all(a <= b for a, b in zip(values, values[1:], strict=False)), (n, c, values)


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (3, [4], 1, "c must be <= n"),
        (3, [1], 4, "k must be <= n"),
        (3, [1], 0, "k must be an integer >= 1"),
        (3, [-1], 1, "c must be >= 0"),
        (0, [0], 1, "n must be >= 1"),
        (3, [1.5], 1, "c must hold integer counts"),
        ([3, 3], [1], 1, "give one n per prompt"),
    ],
)
def test_bad_counts_are_refused(n, c, k, message):
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("n", "ks"),
    [(1, (1,)), (2, (1, 2)), (3, (1, 2, 3)), (4, (1, 2, 4)), (6, (1, 2, 4, 6)), (16, (1, 2, 4, 8, 16))],
)
def test_the_ks_a_run_reports(n, ks):
    assert ks_for(n) == ks


def test_ks_need_one_sample_at_least():
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        ks_for(0)


def test_summarise_counts_only_full_scores_as_correct():
    scores = [[1.0, 0.5, 0.0, 1.0], [0.0, 0.0, 0.99, 0.0], [1.0, 1.0, 1.0, 1.0]]
    pass_at, accuracy = summarise(scores)
    assert sorted(pass_at) == [1, 2, 4]
    for k in (1, 2, 4):  # correct counts 2, 0, 4 of 4
        assert pass_at[k] == pytest.approx(np.mean([exact(4, 2, k), 0.0, 1.0]))
    assert accuracy == pytest.approx(np.mean(scores))
    with pytest.raises(ValueError, match="shape"):
        summarise([[1.0, 0.0], [1.0]])
    with pytest.raises(ValueError, match="shape"):
        summarise(np.zeros((0, 4)))
