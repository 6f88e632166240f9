"""pass@k from n sampled completions per prompt: the unbiased estimator of Chen et al. (2021).

For a prompt with ``n`` samples of which ``c`` are correct, the probability that at least one of
``k`` samples drawn without replacement from those ``n`` is correct is

    pass@k = 1 - C(n - c, k) / C(n, k)

(Chen et al., "Evaluating Large Language Models Trained on Code", arXiv:2107.03374, Eq. 1), and
its mean over prompts estimates the model's pass@k without bias. The binomial coefficients
overflow floats for large ``n``; the ratio is computed as the product

    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)

(1 when ``n - c < k``: every draw of ``k`` holds a correct one). Pure numpy, imported by the run's
sampled eval (:func:`harness.models.tasks.sampled_eval`) and by anyone recomputing pass@k from a
run's ``eval_samples.jsonl``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int | Sequence[int] | np.ndarray, c: Sequence[int] | np.ndarray, k: int) -> np.ndarray:
    """The unbiased pass@k of each prompt, ``1 - C(n - c, k) / C(n, k)`` in its product form.

    Args:
        n: samples per prompt, an int for every prompt or shape ``(P,)``; each >= 1.
        c: correct samples per prompt, shape ``(P,)``; each in ``[0, n]``.
        k: samples drawn, ``1 <= k <= n`` for every prompt.

    Returns:
        Shape ``(P,)`` float64, each in [0, 1].

    Raises:
        ValueError: ``c`` is not one-dimensional, ``n`` and ``c`` differ in length, a count is not
            an integer, ``n < 1``, ``c < 0``, ``c > n``, ``k < 1`` or ``k > n``.
    """
    cs = _counts(c, "c")
    if cs.ndim != 1:
        raise ValueError(f"c must be one-dimensional (one count per prompt), got shape {cs.shape}")
    ns = np.full(cs.shape, n, dtype=np.int64) if np.ndim(n) == 0 else _counts(n, "n")
    if ns.shape != cs.shape:
        raise ValueError(f"n has shape {ns.shape} but c has shape {cs.shape}: give one n per prompt")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    for bad, why in (
        (ns < 1, "n must be >= 1"),
        (cs < 0, "c must be >= 0"),
        (cs > ns, "c must be <= n (more correct samples than samples)"),
        (k > ns, "k must be <= n (more draws than samples)"),
    ):
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{why}: prompt {i} has n={ns[i]}, c={cs[i]}, k={k}")
    out = np.ones(cs.shape, dtype=np.float64)
    for i, (ni, ci) in enumerate(zip(ns.tolist(), cs.tolist(), strict=True)):
        if ni - ci >= k:
            out[i] = 1.0 - float(np.prod(1.0 - k / np.arange(ni - ci + 1, ni + 1, dtype=np.float64)))
    return out


def _counts(values, name: str) -> np.ndarray:
    """``values`` as an int64 array; integral floats pass, anything else raises ValueError."""
    array = np.asarray(values)
    integral = np.issubdtype(array.dtype, np.integer) or (
        np.issubdtype(array.dtype, np.floating)
        and bool(np.all(np.isfinite(array)))
        and bool(np.all(array == np.round(array)))
    )
    if array.size and not integral:
        raise ValueError(f"{name} must hold integer counts, got {values!r}")
    return array.astype(np.int64)


def ks_for(n: int) -> tuple[int, ...]:
    """The k at which a run reports pass@k for ``n`` samples per prompt: 1, 2, 4, ... (powers of
    two up to ``n``), then ``n`` itself when it is not a power of two (``ks_for(6) == (1, 2, 4, 6)``).

    Raises:
        ValueError: ``n < 1``.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    ks = [1 << j for j in range(int(n).bit_length())]
    return (*ks, int(n)) if ks[-1] != n else tuple(ks)


def summarise(scores: Sequence[Sequence[float]] | np.ndarray) -> tuple[dict[int, float], float]:
    """pass@k over prompts and the mean score of a sampled eval.

    Args:
        scores: shape ``(P, n)``: the score in [0, 1] of each of ``n`` samples of ``P >= 1`` prompts
            (a task's :meth:`harness.models.tasks.Task.score`); a sample is correct when its score
            equals 1.

    Returns:
        ``({k: mean over prompts of pass@k for k in ks_for(n)}, mean score over all P * n samples)``.

    Raises:
        ValueError: ``scores`` is not a non-empty ``(P, n)`` array of finite numbers.
    """
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"scores must have shape (prompts, samples), both >= 1; got {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("scores must be finite numbers")
    n = array.shape[1]
    correct = (array == 1.0).sum(axis=1)
    return {k: float(pass_at_k(n, correct, k).mean()) for k in ks_for(n)}, float(array.mean())
