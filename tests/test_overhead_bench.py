"""benchmarks/overhead.py's statistics: the sign test, the bootstrap interval of the median and the
summary it prints (no training: the arms themselves are what the benchmark runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("overhead_bench", ROOT / "benchmarks" / "overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sign_test_matches_the_binomial_by_hand(bench):
    assert bench.sign_test_p(5, 5) == pytest.approx(2 / 32)  # 5 of 5 slower: p = 0.0625, not below 0.05
    assert bench.sign_test_p(0, 10) == pytest.approx(2 / 1024)
    assert bench.sign_test_p(6, 12) == 1.0
    assert bench.sign_test_p(3, 12) == pytest.approx(2 * (1 + 12 + 66 + 220) / 4096)
    with pytest.raises(ValueError):
        bench.sign_test_p(6, 5)


def test_median_interval_holds_the_median_and_is_ordered(bench):
    values = [1.004, 1.007, 1.035, 1.045, 1.104, 0.998, 1.001]
    med, lo, hi = bench.median_ci(values)
    assert med == pytest.approx(1.007)
    assert lo <= med <= hi and min(values) <= lo and hi <= max(values)
    assert bench.median_ci([2.0, 2.0, 2.0])[1:] == (2.0, 2.0)
    with pytest.raises(ValueError):
        bench.median_ci([])


def test_summary_says_the_median_overhead_and_the_sign(bench):
    ratios = {"wall": [1.01, 0.99, 1.0, 1.02], "cpu": [1.0, 1.0, 1.0, 1.0]}
    arms = {
        "bare": {"wall": [0.1] * 4, "cpu": [0.1] * 4},
        "harness": {"wall": [0.101] * 4, "cpu": [0.1] * 4},
    }
    wall, cpu = bench.summary_lines(ratios, arms)
    assert "median 1.0050 (+0.50%)" in wall and "harness slower in 2 of 4" in wall
    assert "bare 100.0 ms/step, harness 101.0 ms/step" in wall
    assert "harness slower in 0 of 4" in cpu


def test_the_per_step_quantiles_equal_numpys():
    """harness.train.wseq's one-sort quantiles (what the harness computes every step) equal np.quantile,
    infinities included (NaN where numpy takes inf - inf)."""
    import numpy as np

    from harness.train.wseq import _quantiles

    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 8, 512):
        for _ in range(50):
            x = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3])
            if rng.random() < 0.3:
                x[rng.integers(0, n)] = np.inf
            if rng.random() < 0.3:
                x[rng.integers(0, n)] = -np.inf
            with np.errstate(invalid="ignore"):
                want, got = np.quantile(x, [0.05, 0.5, 0.95]), _quantiles(x, (0.05, 0.5, 0.95))
            assert np.array_equal(want, got, equal_nan=True), (x, want, got)
