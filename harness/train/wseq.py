"""Sequence-level importance ratios of completions, and their per-step statistics.

For completion i with per-token log-probs ``logp_theta`` (current policy, inside the loss) and
``logp_old`` (the policy that generated it, TRL's ``old_per_token_logps``) and mask ``m``:

* ``log w_seq_i = sum_t m_it (logp_theta_it - logp_old_it)``: the log of the product of token ratios,
  the sequence weight VESPO's gamma function takes (VESPO, Eq. for w(y); TRL ``get_gamma_weights``).
* ``log s_seq_i = log w_seq_i / sum_t m_it``: the length-normalised (geometric-mean) ratio that GSPO
  clips (GSPO, Zheng et al. 2025, Eq. 7; TRL ``importance_sampling_level="sequence"``).

TRL computes ``old_per_token_logps`` only when
``gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0`` (or with vLLM's
importance-sampling correction); otherwise it uses the detached current log-probs, and both ratios
are exactly 1. Everything here is float64 and unclamped: a ratio beyond float range is ``inf`` and
is counted, not hidden.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from harness.layout import LOG_WSEQ_PREFIX, SSEQ_PREFIX, WSEQ_COLUMNS, WSEQ_PREFIX


@torch.no_grad()
def sequence_log_ratios(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor | None,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-completion ``log w_seq`` and ``log s_seq`` in float64.

    Args:
        per_token_logps: (B, T) log-probs of the completion tokens under the current policy.
        old_per_token_logps: (B, T) log-probs under the generating policy, or None when TRL did not
            compute them (the on-policy case: the ratio is then exactly 1).
        mask: (B, T) 1 for completion tokens in the loss, 0 for padding (and tool tokens).

    Returns:
        ``(log_w, log_s, valid)``, each (B,): ``log_w`` = masked sum of token log-ratios,
        ``log_s`` = ``log_w`` / number of masked tokens, ``valid`` = the row has at least one token.
        Rows without tokens get 0 in both and ``valid`` False.
    """
    m = mask.to(torch.float64)
    n_tokens = m.sum(-1)
    valid = n_tokens > 0
    if old_per_token_logps is None:
        zeros = torch.zeros(mask.shape[0], dtype=torch.float64, device=mask.device)
        return zeros, zeros.clone(), valid
    diff = per_token_logps.detach().to(torch.float64) - old_per_token_logps.detach().to(torch.float64)
    # Padding positions can hold anything (even inf - inf); zero them rather than multiply.
    log_w = torch.where(m > 0, diff, torch.zeros_like(diff)).sum(-1)
    log_s = log_w / n_tokens.clamp(min=1.0)
    return log_w, log_s, valid


def wseq_stats(log_w: np.ndarray, log_s: np.ndarray, advantages: np.ndarray, n_masked: int = 0) -> dict:
    """Statistics of ``w_seq`` over all completions of one optimizer step.

    Args:
        log_w: (N,) ``log w_seq`` of every unmasked completion of the step (all micro-batches, all ranks).
        log_s: (N,) ``log s_seq`` (length-normalised) of the same completions.
        advantages: (N,) their advantages; ``>= 0`` counts as positive (VESPO's split).
        n_masked: completions excluded because they had no token in the loss.

    Returns:
        A dict keyed by :data:`WSEQ_COLUMNS`. ``w_seq = exp(log_w)`` in float64 without clamping;
        ``w_seq/n_inf`` counts overflow to ``inf``. Mean and std (population, ddof=0) are over
        ``w_seq``; quantiles are linear-interpolated quantiles of ``log w_seq`` exponentiated (they
        equal ``w_seq`` at data points and stay defined when some ratios are ``inf``). Means over an
        empty set are NaN, counts 0. ``w_seq/ess_frac`` is :func:`ess_fraction` of the step's
        weights (NaN without completions).
    """
    log_w = np.asarray(log_w, dtype=np.float64)
    log_s = np.asarray(log_s, dtype=np.float64)
    adv = np.asarray(advantages, dtype=np.float64)
    n = int(log_w.size)
    out = dict.fromkeys(WSEQ_COLUMNS, math.nan)
    out[WSEQ_PREFIX + "n"] = float(n)
    out[WSEQ_PREFIX + "n_masked"] = float(n_masked)
    pos = adv >= 0
    out[WSEQ_PREFIX + "n_adv_pos"] = float(pos.sum())
    out[WSEQ_PREFIX + "n_adv_neg"] = float((~pos).sum())
    if n == 0:
        out[WSEQ_PREFIX + "n_inf"] = 0.0
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(log_w)
        s = np.exp(log_s)
        q05, q50, q95 = np.exp(_quantiles(log_w, (0.05, 0.5, 0.95)))
        out.update(
            {
                WSEQ_PREFIX + "mean": float(w.mean()),
                WSEQ_PREFIX + "std": float(w.std()),
                WSEQ_PREFIX + "min": float(w.min()),
                WSEQ_PREFIX + "max": float(w.max()),
                WSEQ_PREFIX + "p05": float(q05),
                WSEQ_PREFIX + "p50": float(q50),
                WSEQ_PREFIX + "p95": float(q95),
                WSEQ_PREFIX + "n_inf": float(np.isinf(w).sum()),
                WSEQ_PREFIX + "mean_adv_pos": float(w[pos].mean()) if pos.any() else math.nan,
                WSEQ_PREFIX + "mean_adv_neg": float(w[~pos].mean()) if (~pos).any() else math.nan,
                LOG_WSEQ_PREFIX + "mean": float(log_w.mean()),
                LOG_WSEQ_PREFIX + "min": float(log_w.min()),
                LOG_WSEQ_PREFIX + "max": float(log_w.max()),
                SSEQ_PREFIX + "mean": float(s.mean()),
                SSEQ_PREFIX + "min": float(s.min()),
                SSEQ_PREFIX + "max": float(s.max()),
                WSEQ_PREFIX + "ess_frac": ess_fraction(log_w),
            }
        )
    return out


def ess_fraction(log_w: np.ndarray) -> float:
    """The effective sample size of the weights ``w = exp(log_w)`` over their count,
    ESS/N = (Σw)² / (N·Σw²), in (0, 1] (1 when every weight is equal; 1/N when one weight holds
    everything): Kish's effective sample size (L. Kish, Survey Sampling, 1965), read in
    importance sampling as the share of the samples that still carry the estimate (J. S. Liu,
    Monte Carlo Strategies in Scientific Computing, 2001, ch. 2). Computed from ``log_w`` with the largest subtracted, so it is defined when some
    ``w`` overflow: those dominate and the fraction tends to (their count)/N.

    Args:
        log_w: (N,) log weights, N >= 1, no NaN.
    """
    log_w = np.asarray(log_w, dtype=np.float64)
    top = log_w.max()
    if np.isinf(top):  # +inf weights: the infinite ones share everything equally
        return float(np.isposinf(log_w).sum() / log_w.size)
    w = np.exp(log_w - top)
    return float(w.sum() ** 2 / (log_w.size * (w * w).sum()))


def _quantiles(x: np.ndarray, qs: tuple[float, ...]) -> np.ndarray:
    """``np.quantile(x, qs)`` with numpy's default ``linear`` method (Hyndman & Fan 1996, type 7:
    position ``q * (n - 1)`` of the sorted values, interpolated), by one sort: several times faster
    on the few hundred values of a step, and this runs every optimizer step. ``x`` (N,), N >= 1,
    without NaN; infinities give what numpy gives (NaN where it takes inf - inf)."""
    srt = np.sort(x)
    pos = np.asarray(qs, dtype=np.float64) * (srt.size - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, srt.size - 1)
    frac = pos - lo
    a, b = srt[lo], srt[hi]
    diff = b - a  # numpy's _lerp: a + (b - a) t, from the other end when t >= 0.5
    return np.where(frac >= 0.5, b - diff * (1 - frac), a + diff * frac)
