"""VESPO gamma weights: TRL's implementation against a reference implementation of the official algorithm.

VESPO (Variational Sequence-Level Soft Policy Optimization, arXiv:2602.10693) scales each sequence's
policy-gradient term by a gamma-shaped kernel of the sequence-level importance weight ``w``::

    phi(w) = e^lambda * w^k * e^(-lambda * w)        (normalised so that phi(1) = 1)

with ``(k, lambda) = (k_pos, lambda_pos)`` for sequences with advantage >= 0 and ``(k_neg, lambda_neg)``
otherwise (TRL fields ``vespo_k_pos``, ``vespo_lambda_pos``, ``vespo_k_neg``, ``vespo_lambda_neg``). TRL
computes it in ``GRPOTrainer.get_gamma_weights``: it keeps ``log w`` from the clamped sum of token
log-ratios and clamps it once in log space to ``[log 1e-8, 20]``. The official implementation clamps the
sequence log-ratio to ``[-20, 20]``, exponentiates it to ``w``, and takes the log again of ``w`` floored
at ``1e-8``. :func:`reference_gamma_weights` follows the latter step by step; the two agree to rounding
(the round trip ``log(exp(s))`` costs about 1% relative in bfloat16, nothing measurable in float32).

This module times both per call (``grpo-harness bench vespo``), after checking that they agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import torch

from harness.bench import common

GammaWeightsFn = Callable[..., torch.Tensor]

# TRL's GRPOConfig defaults for the kernel parameters (vespo_k_pos, vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg).
DEFAULT_K_POS = 2.0
DEFAULT_LAMBDA_POS = 3.0
DEFAULT_K_NEG = 3.0
DEFAULT_LAMBDA_NEG = 2.0
# Keyword arguments passed to both implementations, as GRPOTrainer._compute_loss passes them.
DEFAULT_KERNEL = {
    "k_pos": DEFAULT_K_POS,
    "lambda_pos": DEFAULT_LAMBDA_POS,
    "k_neg": DEFAULT_K_NEG,
    "lambda_neg": DEFAULT_LAMBDA_NEG,
}

# Agreement required in float32: relative difference wherever either phi exceeds PHI_FLOOR.
FP32_RTOL = 1e-5
PHI_FLOOR = 1e-30


@overload
def reference_gamma_weights(
    advantages: torch.Tensor,
    log_ratio_per_token: torch.Tensor,
    mask: torch.Tensor,
    importance_sampling_ratio: torch.Tensor | None,
    k_pos: float = ...,
    lambda_pos: float = ...,
    k_neg: float = ...,
    lambda_neg: float = ...,
    *,
    return_w_seq: Literal[False] = ...,
) -> torch.Tensor: ...


@overload
def reference_gamma_weights(
    advantages: torch.Tensor,
    log_ratio_per_token: torch.Tensor,
    mask: torch.Tensor,
    importance_sampling_ratio: torch.Tensor | None,
    k_pos: float = ...,
    lambda_pos: float = ...,
    k_neg: float = ...,
    lambda_neg: float = ...,
    *,
    return_w_seq: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...


@torch.no_grad()
def reference_gamma_weights(
    advantages: torch.Tensor,
    log_ratio_per_token: torch.Tensor,
    mask: torch.Tensor,
    importance_sampling_ratio: torch.Tensor | None,
    k_pos: float = DEFAULT_K_POS,
    lambda_pos: float = DEFAULT_LAMBDA_POS,
    k_neg: float = DEFAULT_K_NEG,
    lambda_neg: float = DEFAULT_LAMBDA_NEG,
    *,
    return_w_seq: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """VESPO gamma weights computed the way the official implementation does (exp, then log again).

    Same signature and result as TRL's ``GRPOTrainer.get_gamma_weights``. Steps:

    1. per-token log-ratio ``log(pi_theta / pi_old)`` clamped to ``[-20, 20]``, summed over the
       tokens where ``mask`` is 1: ``s = sum_t mask * clamp(log_ratio, -20, 20)``;
    2. with a token-level importance-sampling ratio ``r`` (``pi_old / pi_sampler``, e.g. TRL's vLLM
       correction), ``s += sum_t log(max(r, 1e-8))`` over all T positions;
    3. ``w_seq = exp(clamp(s, -20, 20))``;
    4. ``(k, lambda) = (k_pos, lambda_pos)`` where the advantage is >= 0, else ``(k_neg, lambda_neg)``;
       ``lambda`` floored at ``1e-4``;
    5. ``log w = log(max(w_seq, 1e-8))``; ``log phi = lambda + k log w - lambda w_seq``
       (VESPO, arXiv:2602.10693: ``phi(w) = e^lambda w^k e^(-lambda w)``, ``phi(1) = 1``);
    6. ``phi = exp(log phi)`` with NaN and +-inf mapped to 0. No gradient flows (``torch.no_grad``).

    Args:
        advantages: sequence advantages, shape (B, 1), as ``GRPOTrainer._compute_loss`` passes them (a (B,)
            tensor would broadcast to B x B).
        log_ratio_per_token: ``log pi_theta - log pi_old`` per completion token, shape (B x T), float.
        mask: completion mask, shape (B x T), 1 for tokens of the completion and 0 for padding (any dtype).
        importance_sampling_ratio: optional token-level ratio ``pi_old / pi_sampler``, shape (B x T), or None.
        k_pos: power exponent for advantage >= 0 (TRL ``vespo_k_pos``).
        lambda_pos: decay rate for advantage >= 0 (TRL ``vespo_lambda_pos``).
        k_neg: power exponent for advantage < 0 (TRL ``vespo_k_neg``).
        lambda_neg: decay rate for advantage < 0 (TRL ``vespo_lambda_neg``).
        return_w_seq: also return the sequence weight ``w_seq``.

    Returns:
        ``phi``, shape (B, 1), detached; with ``return_w_seq=True``, the pair ``(phi, w_seq)``, both (B, 1).
        Dtype follows torch type promotion of the inputs with float32 ``k`` and ``lambda`` (float32 for
        float32 or bfloat16 log-ratios).
    """
    log_ratio_clamped = torch.clamp(log_ratio_per_token, -20.0, 20.0)
    seq_log_ratio = torch.sum(log_ratio_clamped * mask, dim=-1, keepdim=True)
    if importance_sampling_ratio is not None:
        log_is_ratio = torch.log(torch.clamp(importance_sampling_ratio, min=1e-8))
        seq_log_ratio = seq_log_ratio + torch.sum(log_is_ratio, dim=-1, keepdim=True)
    seq_log_ratio = torch.clamp(seq_log_ratio, -20.0, 20.0)
    w_seq = torch.exp(seq_log_ratio)

    is_nonneg_adv = advantages >= 0
    k_seq = torch.where(is_nonneg_adv, k_pos, k_neg)
    lambda_seq = torch.where(is_nonneg_adv, lambda_pos, lambda_neg).clamp(min=1e-4)

    log_w = torch.log(torch.clamp(w_seq, min=1e-8))
    log_phi = lambda_seq + k_seq * log_w - lambda_seq * w_seq
    phi = torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    if return_w_seq:
        return phi, w_seq
    return phi


def trl_gamma_weights() -> GammaWeightsFn:
    """TRL's ``GRPOTrainer.get_gamma_weights`` (a staticmethod, taken from the class; no trainer is built)."""
    from trl import GRPOTrainer

    return GRPOTrainer.get_gamma_weights


def gamma_peak(k: float, lam: float) -> tuple[float, float]:
    """Location and height of the maximum of ``phi(w) = e^lam w^k e^(-lam w)``.

    ``d log phi / dw = k / w - lam`` vanishes at ``w* = k / lam``, where ``phi(w*) = e^lam (k/lam)^k e^(-k)``.

    Args:
        k: power exponent (> 0).
        lam: decay rate (> 0).

    Returns:
        ``(w*, phi(w*))``.

    Raises:
        ValueError: if ``k`` or ``lam`` is not positive.
    """
    if k <= 0 or lam <= 0:
        raise ValueError(f"k and lambda must be > 0, got k={k}, lambda={lam}")
    w_star = k / lam
    return w_star, math.exp(lam) * w_star**k * math.exp(-k)


@dataclass
class VespoBatch:
    """Inputs of one gamma-weight call.

    Attributes:
        name: label used in messages and tables, e.g. ``"32x512"``.
        advantages: (B, 1) float32 sequence advantages, both signs.
        log_ratio: (B x T) per-token ``log pi_theta - log pi_old``.
        mask: (B x T) int32 completion mask (1 on the completion, 0 on padding).
        is_ratio: (B x T) token-level importance-sampling ratio ``pi_old / pi_sampler`` (1 on padding).
    """

    name: str
    advantages: torch.Tensor
    log_ratio: torch.Tensor
    mask: torch.Tensor
    is_ratio: torch.Tensor

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> VespoBatch:
        """Copy to ``device``; ``dtype`` applies to the floating token tensors (advantages stay float32)."""
        return VespoBatch(
            name=self.name,
            advantages=self.advantages.to(device=device),
            log_ratio=self.log_ratio.to(device=device, dtype=dtype),
            mask=self.mask.to(device=device),
            is_ratio=self.is_ratio.to(device=device, dtype=dtype),
        )

    def args(
        self, with_is_ratio: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Positional arguments of ``get_gamma_weights``: advantages, log-ratio, mask, IS ratio or None."""
        return self.advantages, self.log_ratio, self.mask, self.is_ratio if with_is_ratio else None


def make_vespo_batch(
    batch_size: int,
    seq_len: int,
    *,
    seed: int = 0,
    log_ratio_std: float = 0.05,
    is_log_std: float = 0.02,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> VespoBatch:
    """Realistic synthetic inputs for one gamma-weight call, generated on the CPU from ``seed``.

    Completion lengths are uniform in ``[max(1, T // 8), T]`` with one sequence in eight at full length
    (truncated); per-token log-ratios ~ N(0, ``log_ratio_std``) on the completion (off-policy drift of a
    few updates); advantages ~ N(0, 1) (both signs); IS ratios ``exp(N(0, is_log_std))`` on the
    completion and exactly 1 on padding (TRL zeroes the log-difference there).

    Args:
        batch_size: B, number of sequences.
        seq_len: T, padded completion length in tokens.
        seed: seed of the CPU generator; the same seed gives the same values on every device.
        log_ratio_std: standard deviation of the per-token log-ratio (nats).
        is_log_std: standard deviation of the per-token log IS ratio (nats).
        device: where the returned tensors live.
        dtype: dtype of ``log_ratio`` and ``is_ratio``.

    Returns:
        A :class:`VespoBatch`.

    Raises:
        ValueError: if ``batch_size`` or ``seq_len`` is < 1.
    """
    if batch_size < 1 or seq_len < 1:
        raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size} x {seq_len}")
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, seq_len // 8), seq_len + 1, (batch_size,), generator=gen)
    lengths[::8] = seq_len
    mask = (torch.arange(seq_len).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int32)
    log_ratio = torch.randn(batch_size, seq_len, generator=gen) * log_ratio_std * mask
    advantages = torch.randn(batch_size, 1, generator=gen)
    is_ratio = torch.exp(torch.randn(batch_size, seq_len, generator=gen) * is_log_std * mask)
    batch = VespoBatch(f"{batch_size}x{seq_len}", advantages, log_ratio, mask, is_ratio)
    return batch.to(device=device, dtype=dtype)


def make_edge_case_batch(
    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> VespoBatch:
    """A small (10 x 16) batch hitting every branch of the gamma weights.

    Rows: fully masked (``w_seq = 1``); sequence log-ratio at the kernel peak ``log(k/lambda)`` for each
    advantage sign; ``s = -19`` (between -20 and ``log 1e-8``, where the two implementations clamp
    differently); ``s = -25`` (below both lower clamps); ``s = +25`` (above 20, phi underflows to 0); a
    per-token log-ratio of 30 (clamped per token); IS ratios of 0 (TRL's ``token_mask`` mode); an
    advantage of exactly 0 (takes the positive pair); and an ordinary row.

    Args:
        device: where the returned tensors live.
        dtype: dtype of ``log_ratio`` and ``is_ratio``.

    Returns:
        A :class:`VespoBatch` named ``"edge cases"``.
    """
    rows, seq_len = 10, 16
    log_ratio = torch.zeros(rows, seq_len, dtype=torch.float64)
    mask = torch.ones(rows, seq_len, dtype=torch.int32)
    is_ratio = torch.ones(rows, seq_len, dtype=torch.float64)
    advantages = torch.tensor([0.7, 1.2, -0.8, 0.5, -1.5, 0.9, -0.3, 1.1, 0.0, -0.6], dtype=torch.float64)
    mask[0] = 0  # fully masked
    log_ratio[0] = 0.3  # ignored: masked out
    log_ratio[1, 0] = math.log(DEFAULT_K_POS / DEFAULT_LAMBDA_POS)  # peak of the positive kernel
    log_ratio[2, 0] = math.log(DEFAULT_K_NEG / DEFAULT_LAMBDA_NEG)  # peak of the negative kernel
    log_ratio[3, 0] = -19.0  # -20 < s < log(1e-8)
    log_ratio[4, :2] = -12.5  # s = -25
    log_ratio[5, :2] = 12.5  # s = +25
    log_ratio[6, 3] = 30.0  # clamped to 20 per token, then -22 from the next token
    log_ratio[6, 4] = -22.0
    is_ratio[7, 5] = 0.0  # token_mask mode zeroes out-of-range ratios
    log_ratio[8] = torch.linspace(-0.05, 0.15, seq_len, dtype=torch.float64)  # s = 0.8, advantage 0
    mask[9, 10:] = 0
    log_ratio[9] = 0.04
    batch = VespoBatch("edge cases", advantages.float().unsqueeze(1), log_ratio, mask, is_ratio)
    return batch.to(device=device, dtype=dtype)


class EquivalenceError(AssertionError):
    """Raised when TRL's gamma weights and the reference implementation disagree beyond tolerance."""


@dataclass
class Agreement:
    """Largest disagreement between two gamma-weight implementations over a set of calls.

    Attributes:
        dtype: dtype of the token tensors in the compared calls.
        calls: number of (batch, IS-ratio on/off) calls compared.
        sequences: total number of sequences (rows) compared.
        significant: rows where either ``phi`` exceeds :data:`PHI_FLOOR`; only these enter the relative difference.
        max_rel_diff: largest ``|a - b| / max(|a|, |b|)`` over significant rows (0.0 when there are none).
        where: description of the row with the largest difference.
        nonfinite: rows where either output is NaN or infinite (must be 0).
        shape_mismatch: descriptions of calls whose outputs had different shapes.
    """

    dtype: str
    calls: int = 0
    sequences: int = 0
    significant: int = 0
    max_rel_diff: float = 0.0
    where: str = ""
    nonfinite: int = 0
    shape_mismatch: list[str] | None = None


def _relative_difference(a: torch.Tensor, b: torch.Tensor, floor: float) -> tuple[torch.Tensor, torch.Tensor]:
    a64, b64 = a.double().flatten(), b.double().flatten()
    scale = torch.maximum(a64.abs(), b64.abs())
    significant = scale > floor
    rel = torch.where(significant, (a64 - b64).abs() / scale.clamp(min=floor), torch.zeros_like(scale))
    return rel, significant


def measure_agreement(
    candidate: GammaWeightsFn,
    reference: GammaWeightsFn,
    batches: Sequence[VespoBatch],
    *,
    dtype: torch.dtype = torch.float32,
    floor: float = PHI_FLOOR,
) -> Agreement:
    """Run both implementations on the same inputs, with and without the IS ratio, and compare.

    Args:
        candidate: the implementation under test (normally TRL's ``GRPOTrainer.get_gamma_weights``).
        reference: the implementation it must match (normally :func:`reference_gamma_weights`).
        batches: inputs; each is cast to ``dtype`` (token tensors only) and used twice (IS ratio on, off).
        dtype: dtype of the log-ratio and IS-ratio tensors for this comparison.
        floor: rows where both ``phi`` are <= ``floor`` count as agreeing (both underflowed).

    Returns:
        An :class:`Agreement` summary; nothing is raised here.
    """
    result = Agreement(dtype=common.dtype_name(dtype), shape_mismatch=[])
    kwargs = DEFAULT_KERNEL
    for batch in batches:
        cast = batch.to(dtype=dtype)
        for with_is in (False, True):
            label = f"{batch.name} {'with' if with_is else 'without'} IS ratio ({result.dtype})"
            got = candidate(*cast.args(with_is), **kwargs)
            want = reference(*cast.args(with_is), **kwargs)
            result.calls += 1
            if got.shape != want.shape:
                result.shape_mismatch.append(f"{label}: {tuple(got.shape)} vs {tuple(want.shape)}")
                continue
            result.sequences += got.shape[0]
            finite = torch.isfinite(got).flatten() & torch.isfinite(want).flatten()
            result.nonfinite += int((~finite).sum())
            rel, significant = _relative_difference(got, want, floor)
            result.significant += int(significant.sum())
            worst = int(rel.argmax())
            if float(rel[worst]) > result.max_rel_diff or (not result.where and rel.numel()):
                seq_log_ratio = float((cast.log_ratio.double().clamp(-20, 20) * cast.mask).sum(-1)[worst])
                result.max_rel_diff = float(rel[worst])
                result.where = (
                    f"{label}, row {worst}: advantage {float(cast.advantages.flatten()[worst]):+.3g}, "
                    f"masked sum of token log-ratios {seq_log_ratio:+.4g}, "
                    f"candidate phi {float(got.flatten()[worst]):.6g}, reference phi {float(want.flatten()[worst]):.6g}"
                )
    return result


def check_equivalence(
    batches: Sequence[VespoBatch],
    *,
    candidate: GammaWeightsFn | None = None,
    reference: GammaWeightsFn = reference_gamma_weights,
    rtol: float = FP32_RTOL,
    floor: float = PHI_FLOOR,
    dtype: torch.dtype = torch.float32,
) -> Agreement:
    """Check that two gamma-weight implementations agree; raise if they do not.

    Agreement means: same output shapes; no NaN or inf; and ``|a - b| <= rtol * max(|a|, |b|)`` on every
    row where either value exceeds ``floor`` (rows where both are <= ``floor`` have both underflowed to ~0).

    Args:
        batches: inputs, each used with and without its IS ratio.
        candidate: implementation under test; TRL's ``GRPOTrainer.get_gamma_weights`` when None.
        reference: implementation to match; :func:`reference_gamma_weights` by default.
        rtol: largest relative difference allowed (1e-5 for float32).
        floor: underflow threshold for ``phi`` (1e-30).
        dtype: dtype of the token tensors (float32 for the strict check).

    Returns:
        The :class:`Agreement` summary when the implementations agree.

    Raises:
        EquivalenceError: on different shapes, non-finite outputs, or a relative difference above ``rtol``.
    """
    candidate = trl_gamma_weights() if candidate is None else candidate
    agreement = measure_agreement(candidate, reference, batches, dtype=dtype, floor=floor)
    problems = []
    if agreement.shape_mismatch:
        problems.append("output shapes differ: " + "; ".join(agreement.shape_mismatch))
    if agreement.nonfinite:
        problems.append(f"{agreement.nonfinite} rows are NaN or infinite")
    if agreement.max_rel_diff > rtol:
        problems.append(
            f"largest relative difference {agreement.max_rel_diff:.3g} exceeds {rtol:g} at {agreement.where}"
        )
    if problems:
        name = getattr(candidate, "__qualname__", repr(candidate))
        ref_name = getattr(reference, "__qualname__", repr(reference))
        raise EquivalenceError(
            f"VESPO gamma weights of {name} and {ref_name} disagree in {agreement.dtype} "
            f"over {agreement.calls} calls: " + "; ".join(problems)
        )
    return agreement


@dataclass
class Bf16Report:
    """Rounding of both implementations in bfloat16, each against a float64 evaluation of the same inputs.

    Attributes:
        between: largest relative difference between TRL and the reference, both in bfloat16.
        trl_vs_fp64: largest relative error of TRL in bfloat16.
        reference_vs_fp64: largest relative error of the reference in bfloat16.
        where: row with the largest difference between the two.
    """

    between: float
    trl_vs_fp64: float
    reference_vs_fp64: float
    where: str


def bf16_report(batches: Sequence[VespoBatch], trl_fn: GammaWeightsFn | None = None) -> Bf16Report:
    """Measure (without raising) how far the two implementations drift apart and from float64 in bfloat16.

    The bfloat16 inputs are upcast to float64 for the exact evaluation, so only the arithmetic differs.

    Args:
        batches: inputs, each used with and without its IS ratio.
        trl_fn: TRL's implementation; looked up when None.

    Returns:
        A :class:`Bf16Report`; the relative differences count rows where either phi exceeds :data:`PHI_FLOOR`.
    """
    trl_fn = trl_gamma_weights() if trl_fn is None else trl_fn
    between = measure_agreement(trl_fn, reference_gamma_weights, batches, dtype=torch.bfloat16)
    quantised = [b.to(dtype=torch.bfloat16).to(dtype=torch.float64) for b in batches]

    def against_fp64(fn: GammaWeightsFn) -> float:
        worst = 0.0
        for batch, exact_batch in zip(batches, quantised, strict=True):
            low = batch.to(dtype=torch.bfloat16)
            for with_is in (False, True):
                rel, _ = _relative_difference(
                    fn(*low.args(with_is)), reference_gamma_weights(*exact_batch.args(with_is)), PHI_FLOOR
                )
                worst = max(worst, float(rel.max()))
        return worst

    return Bf16Report(
        between=between.max_rel_diff,
        trl_vs_fp64=against_fp64(trl_fn),
        reference_vs_fp64=against_fp64(reference_gamma_weights),
        where=between.where,
    )


@dataclass
class VespoRow:
    """One line of the VESPO timing table.

    Attributes:
        shape: (B, T).
        with_is_ratio: whether the token-level IS ratio was passed.
        trl: per-call time of TRL's ``get_gamma_weights`` (milliseconds).
        reference: per-call time of :func:`reference_gamma_weights` (milliseconds).
        trl_speedup: median over measurement cycles of ``time(reference) / time(TRL)``; > 1 means TRL is faster.
        trl_speedup_quartiles: (25th, 75th) percentiles of the same per-cycle ratios.
    """

    shape: common.Shape
    with_is_ratio: bool
    trl: common.Timing
    reference: common.Timing
    trl_speedup: float
    trl_speedup_quartiles: tuple[float, float]

    @property
    def faster(self) -> str:
        """``"TRL"`` or ``"reference"``, from the paired ratio :attr:`trl_speedup`."""
        return "TRL" if self.trl_speedup >= 1.0 else "reference"

    @property
    def ratio(self) -> float:
        """How many times faster the faster side is (>= 1)."""
        return self.trl_speedup if self.trl_speedup >= 1.0 else 1.0 / self.trl_speedup


def time_vespo(
    batches: Sequence[VespoBatch],
    *,
    device: torch.device,
    timing: common.TimingSettings,
    num_threads: int,
    trl_fn: GammaWeightsFn | None = None,
) -> list[VespoRow]:
    """Time TRL's gamma weights and the reference per call, under ``torch.no_grad()``, side by side.

    Args:
        batches: one batch per shape, already on ``device`` in the timing dtype.
        device: where the batches live.
        timing: the measurement settings (see :func:`common.time_side_by_side`).
        num_threads: intra-op threads.
        trl_fn: TRL's implementation; looked up when None.

    Returns:
        Rows ordered by IS ratio (with first, as in the reported table) then by the order of ``batches``;
        times in milliseconds.
    """
    trl_fn = trl_gamma_weights() if trl_fn is None else trl_fn
    ref_fn = reference_gamma_weights
    kwargs = DEFAULT_KERNEL
    rows = []
    with torch.no_grad():
        for with_is in (True, False):
            for batch in batches:
                args = batch.args(with_is)
                result = common.time_side_by_side(
                    {
                        "TRL": lambda args=args: trl_fn(*args, **kwargs),
                        "reference": lambda args=args: ref_fn(*args, **kwargs),
                    },
                    device=device,
                    timing=timing,
                    num_threads=num_threads,
                    baseline="TRL",
                    label=f"gamma weights {batch.name}",
                )
                rows.append(
                    VespoRow(
                        shape=(batch.log_ratio.shape[0], batch.log_ratio.shape[1]),
                        with_is_ratio=with_is,
                        trl=result.timings["TRL"],
                        reference=result.timings["reference"],
                        trl_speedup=result.ratios["reference"],
                        trl_speedup_quartiles=result.ratio_quartiles["reference"],
                    )
                )
    return rows


def render_vespo(
    rows: Sequence[VespoRow],
    info: dict[str, str],
    *,
    preset: str,
    timing: common.TimingSettings,
    dtype: torch.dtype,
    fp32: Agreement,
    bf16: Bf16Report,
) -> str:
    """Markdown report: header, agreement summary and one ``B x T | TRL | reference | faster`` table per IS setting.

    Args:
        rows: the timings from :func:`time_vespo` (ms per call).
        info: the machine description from :func:`common.machine_info`.
        preset: preset name recorded in the header.
        timing: the measurement settings recorded in the header.
        dtype: dtype of the timed token tensors.
        fp32: the float32 agreement checked before timing.
        bf16: the bfloat16 rounding report.

    Returns:
        The report, lines joined by newlines; an IS setting without rows gets no table.
    """
    dtype_name = common.dtype_name(dtype)
    lines = [
        f"# VESPO gamma weights per call on {info['machine']}",
        "",
        "TRL `GRPOTrainer.get_gamma_weights` (clamps `log w` once, in log space) against a reference "
        "implementation of the official algorithm (exponentiates, then takes the log again of `w` floored "
        "at 1e-8), same inputs, under `torch.no_grad()`.",
        "",
        *common.header_lines(info, preset, timing),
        f"- inputs: {dtype_name} log-ratios ~ N(0, 0.05) per token, random completion lengths, "
        "advantages of both signs, IS ratios exp(N(0, 0.02)); seeded",
        f"- agreement (float32, checked before timing): largest relative difference "
        f"{fp32.max_rel_diff:.2e} over {fp32.significant} sequences with phi > {PHI_FLOOR:g} "
        f"({fp32.calls} calls, {fp32.sequences} sequences, edge cases included)",
        f"- bfloat16: largest relative difference between the two {bf16.between:.2e}; "
        f"against float64, TRL {bf16.trl_vs_fp64:.2e}, reference {bf16.reference_vs_fp64:.2e}",
        "",
    ]
    lines += [
        "`faster`: the faster side and how many times faster, from the median over measurement cycles of the "
        "paired time ratio (the ms columns are per-implementation medians).",
        "",
    ]
    for with_is, title in ((True, "With token-level IS ratio"), (False, "Without IS ratio")):
        selected = [row for row in rows if row.with_is_ratio == with_is]
        if not selected:
            continue
        table = common.markdown_table(
            ["B x T", "TRL (ms)", "reference (ms)", "faster"],
            [
                [
                    common.format_shape(row.shape),
                    common.format_ms(row.trl.median_ms),
                    common.format_ms(row.reference.median_ms),
                    f"{row.faster} {row.ratio:.2f}x",
                ]
                for row in selected
            ],
            ["l", "r", "r", "l"],
        )
        lines += [f"## {title}", "", table, ""]
    return "\n".join(lines)


def vespo_csv_rows(
    rows: Sequence[VespoRow], info: dict[str, str], dtype: torch.dtype
) -> list[dict[str, Any]]:
    """Flat CSV rows: one per (B x T shape, IS setting), times in milliseconds, machine columns repeated."""
    out = []
    for row in rows:
        out.append(
            {
                "B": row.shape[0],
                "T": row.shape[1],
                "is_ratio": int(row.with_is_ratio),
                "dtype": common.dtype_name(dtype),
                "trl_ms": round(row.trl.median_ms, 6),
                "reference_ms": round(row.reference.median_ms, 6),
                "trl_iqr_ms": round(row.trl.iqr_ms, 6),
                "reference_iqr_ms": round(row.reference.iqr_ms, 6),
                "trl_min_ms": round(row.trl.min_ms, 6),
                "reference_min_ms": round(row.reference.min_ms, 6),
                "faster": row.faster,
                "ratio": round(row.ratio, 4),
                "trl_speedup": round(row.trl_speedup, 4),
                "trl_speedup_q1": round(row.trl_speedup_quartiles[0], 4),
                "trl_speedup_q3": round(row.trl_speedup_quartiles[1], 4),
                "trl_calls": row.trl.calls,
                "reference_calls": row.reference.calls,
                **info,
            }
        )
    return out


def run_vespo(run: common.BenchRun) -> str:
    """The ``bench vespo`` sub-command: check agreement, time, and write ``vespo.md`` and ``vespo.csv``.

    Args:
        run: device, B x T shapes, timing settings, threads, dtype of the timed log-ratio and IS-ratio
            tensors, seed (shape i uses ``seed + i``), preset name and output folder (nothing is written
            when ``run.out_dir`` is None).

    Returns:
        The markdown report.

    Raises:
        EquivalenceError: if TRL and the reference disagree in float32; raised before any timing.
    """
    trl_fn = trl_gamma_weights()
    device = run.device
    base = [make_vespo_batch(b, t, seed=run.seed + i, device=device) for i, (b, t) in enumerate(run.sizes)]
    checked = [*base, make_edge_case_batch(device=device)]
    fp32 = check_equivalence(checked, candidate=trl_fn)
    bf16 = bf16_report(checked, trl_fn)
    rows = time_vespo(
        [b.to(dtype=run.dtype) for b in base],
        device=device,
        timing=run.timing,
        num_threads=run.num_threads,
        trl_fn=trl_fn,
    )
    info = common.machine_info(device, run.num_threads)
    report = render_vespo(
        rows, info, preset=run.preset, timing=run.timing, dtype=run.dtype, fp32=fp32, bf16=bf16
    )
    common.write_report(run.out_dir, "vespo", report, vespo_csv_rows(rows, info, run.dtype))
    return report
