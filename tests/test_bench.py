"""Tests of the loss micro-benchmarks: the VESPO reference, the agreement check, and both sub-commands.

No test asserts anything about wall-clock time.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys

import pytest
import torch

from harness import bench
from harness.bench import common
from harness.bench.probe import make_loss_stand_in
from harness.bench.settings import LOSS_VARIANTS
from harness.bench.vespo import (
    EquivalenceError,
    VespoBatch,
    bf16_report,
    check_equivalence,
    gamma_peak,
    make_edge_case_batch,
    make_vespo_batch,
    reference_gamma_weights,
    trl_gamma_weights,
)
from harness.losses.stand_in import make_loss_batch, trl_config_defaults

LOG_1E8 = math.log(1e-8)
PAIRS = {"pos": (0.8, 2.0, 3.0), "neg": (-0.8, 3.0, 2.0)}  # advantage, k, lambda (TRL defaults)


def one_sequence(token_log_ratios: list[float], advantage: float, tokens: int = 8) -> VespoBatch:
    """A single float64 sequence whose first len(token_log_ratios) tokens are unmasked."""
    log_ratio = torch.zeros(1, tokens, dtype=torch.float64)
    mask = torch.zeros(1, tokens, dtype=torch.int32)
    log_ratio[0, : len(token_log_ratios)] = torch.tensor(token_log_ratios, dtype=torch.float64)
    mask[0, : len(token_log_ratios)] = 1
    is_ratio = torch.ones(1, tokens, dtype=torch.float64)
    return VespoBatch("one", torch.tensor([[advantage]], dtype=torch.float64), log_ratio, mask, is_ratio)


def phi_at(seq_log_ratio: float, advantage: float) -> float:
    return float(reference_gamma_weights(*one_sequence([seq_log_ratio], advantage).args(False)))


# --- reference implementation, hand-computed cases -------------------------------------------------------


@pytest.mark.parametrize("advantage", [1.3, 0.0, -0.7])
@pytest.mark.parametrize("with_is", [False, True])
def test_fully_masked_row_gives_unit_weight(advantage: float, with_is: bool) -> None:
    log_ratio = torch.full((1, 6), 0.4)
    mask = torch.zeros(1, 6, dtype=torch.int32)
    is_ratio = torch.ones(1, 6) if with_is else None
    phi, w_seq = reference_gamma_weights(
        torch.tensor([[advantage]]), log_ratio, mask, is_ratio, return_w_seq=True
    )
    assert w_seq.shape == phi.shape == (1, 1)
    assert float(w_seq) == 1.0
    assert float(phi) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("sign", ["pos", "neg"])
def test_kernel_peaks_at_k_over_lambda(sign: str) -> None:
    advantage, k, lam = PAIRS[sign]
    w_star, peak = gamma_peak(k, lam)
    assert w_star == pytest.approx(k / lam)
    assert peak == pytest.approx(math.exp(lam) * (k / lam) ** k * math.exp(-k))
    s_star = math.log(w_star)
    phi_star = phi_at(s_star, advantage)
    assert phi_star == pytest.approx(peak, rel=1e-6)
    for delta in (1e-3, 1e-2, 0.1, 0.5):
        assert phi_at(s_star - delta, advantage) < phi_star
        assert phi_at(s_star + delta, advantage) < phi_star
    # w_seq returned alongside phi is the exponentiated sequence log-ratio
    _, w_seq = reference_gamma_weights(*one_sequence([s_star], advantage).args(False), return_w_seq=True)
    assert float(w_seq) == pytest.approx(w_star, rel=1e-12)


def test_peak_values_for_trl_defaults() -> None:
    # e^3 (2/3)^2 e^-2 = 4e/9 and e^2 (3/2)^3 e^-3 = 27/(8e)
    assert gamma_peak(2.0, 3.0)[1] == pytest.approx(4 * math.e / 9)
    assert gamma_peak(3.0, 2.0)[1] == pytest.approx(27 / (8 * math.e))
    with pytest.raises(ValueError):
        gamma_peak(0.0, 1.0)


def test_unit_sequence_weight_gives_unit_phi() -> None:
    for advantage, _, _ in PAIRS.values():
        assert phi_at(0.0, advantage) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("sign", ["pos", "neg"])
@pytest.mark.parametrize("seq_log_ratio", [-19.9, -19.0, -18.5])
def test_log_ratio_between_minus_20_and_log_1e8_agrees(sign: str, seq_log_ratio: float) -> None:
    # The reference clamps at -20 then floors w at 1e-8; TRL clamps log w at log(1e-8) directly.
    assert -20.0 < seq_log_ratio < LOG_1E8
    advantage, k, lam = PAIRS[sign]
    batch = one_sequence([seq_log_ratio / 2, seq_log_ratio / 2], advantage)
    ours = float(reference_gamma_weights(*batch.args(False)))
    theirs = float(trl_gamma_weights()(*batch.args(False)))
    expected = math.exp(lam + k * LOG_1E8 - lam * math.exp(seq_log_ratio))
    assert ours == pytest.approx(expected, rel=1e-9)
    assert theirs == pytest.approx(ours, rel=1e-7)
    assert ours > 1e-30
    # float32, as timed
    batch32 = batch.to(dtype=torch.float32)
    ours32 = float(reference_gamma_weights(*batch32.args(False)))
    theirs32 = float(trl_gamma_weights()(*batch32.args(False)))
    assert theirs32 == pytest.approx(ours32, rel=1e-5)


def test_importance_ratio_enters_as_sum_of_floored_logs() -> None:
    batch = one_sequence([0.1, -0.2, 0.05], 0.5)
    batch.is_ratio[0, :3] = torch.tensor([1.1, 0.9, 0.0], dtype=torch.float64)
    _, w_seq = reference_gamma_weights(*batch.args(True), return_w_seq=True)
    expected = -0.05 + math.log(1.1) + math.log(0.9) + LOG_1E8
    assert float(w_seq) == pytest.approx(math.exp(expected), rel=1e-12)


def test_large_sequence_ratio_underflows_to_zero() -> None:
    for advantage, _, _ in PAIRS.values():
        assert phi_at(25.0, advantage) == 0.0


def test_reference_is_detached() -> None:
    log_ratio = torch.randn(3, 5, requires_grad=True)
    phi = reference_gamma_weights(torch.randn(3, 1), log_ratio, torch.ones(3, 5), None)
    assert not phi.requires_grad


# --- agreement check ---------------------------------------------------------------------------------------


def checked_batches() -> list[VespoBatch]:
    return [make_vespo_batch(8, 64, seed=1), make_vespo_batch(16, 128, seed=2), make_edge_case_batch()]


def test_trl_and_reference_agree_in_float32() -> None:
    agreement = check_equivalence(checked_batches())
    assert agreement.calls == 6
    assert agreement.max_rel_diff <= 1e-5
    assert agreement.nonfinite == 0
    assert 0 < agreement.significant < agreement.sequences  # the edge cases include underflow rows


def test_bf16_round_trip_costs_about_one_percent() -> None:
    report = bf16_report(checked_batches())
    assert 0.0 < report.between < 0.05
    assert report.where


def _zero_advantage_takes_negative_pair(advantages, log_ratio, mask, is_ratio, **kwargs):
    # wrong: an advantage of exactly 0 must take the positive pair
    shifted = torch.where(advantages == 0, torch.full_like(advantages, -1.0), advantages)
    return reference_gamma_weights(shifted, log_ratio, mask, is_ratio, **kwargs)


def _ignores_mask(advantages, log_ratio, mask, is_ratio, **kwargs):
    return reference_gamma_weights(advantages, log_ratio, torch.ones_like(mask), is_ratio, **kwargs)


def _drops_is_ratio(advantages, log_ratio, mask, is_ratio, **kwargs):
    return reference_gamma_weights(advantages, log_ratio, mask, None, **kwargs)


def _swaps_pairs(advantages, log_ratio, mask, is_ratio, k_pos, lambda_pos, k_neg, lambda_neg):
    return reference_gamma_weights(
        advantages, log_ratio, mask, is_ratio, k_neg, lambda_neg, k_pos, lambda_pos
    )


def _no_floor(advantages, log_ratio, mask, is_ratio, k_pos, lambda_pos, k_neg, lambda_neg):
    # wrong: lets log w follow the sequence log-ratio down to -20 instead of flooring w at 1e-8
    s = torch.clamp((torch.clamp(log_ratio, -20, 20) * mask).sum(-1, keepdim=True), -20, 20)
    k = torch.where(advantages >= 0, k_pos, k_neg)
    lam = torch.where(advantages >= 0, lambda_pos, lambda_neg)
    return torch.exp(lam + k * s - lam * torch.exp(s)).nan_to_num(0.0, 0.0, 0.0)


def _wrong_shape(advantages, log_ratio, mask, is_ratio, **kwargs):
    return reference_gamma_weights(advantages, log_ratio, mask, is_ratio, **kwargs).squeeze(-1)


@pytest.mark.parametrize(
    "wrong",
    [
        _zero_advantage_takes_negative_pair,
        _ignores_mask,
        _drops_is_ratio,
        _swaps_pairs,
        _no_floor,
        _wrong_shape,
    ],
)
def test_check_raises_on_wrong_implementation(wrong) -> None:
    with pytest.raises(EquivalenceError, match="disagree"):
        check_equivalence(checked_batches(), candidate=wrong)


def test_check_raises_on_nan() -> None:
    def nan_phi(*args, **kwargs):
        out = reference_gamma_weights(*args, **kwargs).clone()
        out[0] = float("nan")
        return out

    with pytest.raises(EquivalenceError, match="NaN"):
        check_equivalence([make_edge_case_batch()], candidate=nan_phi)


# --- CLI ---------------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="grpo-harness bench")
    bench.add_arguments(parser)
    return parser.parse_args(argv)


TINY = ["--device", "cpu", "--repeats", "1", "--min-run-time", "0.001", "--threads", "1"]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row in ``text`` (header rows included, separator rows not)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_bench_vespo_command_writes_tables(tmp_path, capsys) -> None:
    args = parse(["vespo", *TINY, "--sizes", "2x16,4x32", "--out", str(tmp_path)])
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert rows.count(["B x T", "TRL (ms)", "reference (ms)", "faster"]) == 2
    assert "With token-level IS ratio" in out and "Without IS ratio" in out
    timed = [row for row in rows if row[0] == "4 x 32"]
    assert len(timed) == 2
    for _, trl_ms, reference_ms, faster in timed:
        assert re.fullmatch(r"[\d.]+", trl_ms) and re.fullmatch(r"[\d.]+", reference_ms)
        assert re.fullmatch(r"(TRL|reference) [\d.]+x", faster)
    md = (tmp_path / "cpu" / "vespo.md").read_text()
    assert "torch " in md and "trl " in md and "intra-op threads: 1" in md
    csv_lines = (tmp_path / "cpu" / "vespo.csv").read_text().splitlines()
    assert csv_lines[0].startswith("B,T,is_ratio,dtype,trl_ms,reference_ms")
    assert len(csv_lines) == 1 + 2 * 2


def test_bench_vespo_fails_loudly_when_implementations_disagree(tmp_path, capsys, monkeypatch) -> None:
    import harness.bench.vespo as vespo_module

    monkeypatch.setattr(vespo_module, "trl_gamma_weights", lambda: _swaps_pairs)
    args = parse(["vespo", *TINY, "--sizes", "2x16", "--out", str(tmp_path)])
    assert bench.main(args) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.err and "disagree" in captured.err
    assert "| B x T |" not in captured.out
    assert not (tmp_path / "cpu" / "vespo.md").exists()


def test_bench_losses_covers_every_loss_type(tmp_path, capsys) -> None:
    args = parse(["losses", *TINY, "--sizes", "2x8,3x16", "--out", str(tmp_path)])
    assert bench.main(args) == 0
    out = capsys.readouterr().out
    rows = {row[0]: row[1:] for row in table_rows(out)}
    expected = {"grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo", "gspo"}
    expected |= {"gmpo", "kl_cov", "clip_cov", "grpo_mirror"}  # loss plugins, timed beside the built-ins
    assert expected <= set(rows)
    assert rows["loss"] == ["TRL loss_type", "IS level", "2 x 8", "3 x 16"]
    assert rows["grpo"][:2] == ["grpo", "token"] and all(c.endswith("(1.00x)") for c in rows["grpo"][2:])
    assert rows["gspo"][:2] == ["grpo", "sequence"]
    csv_text = (tmp_path / "cpu" / "losses.csv").read_text()
    assert len(csv_text.splitlines()) == 1 + 2 * len(expected)


def test_bench_losses_rejects_unknown_variant(tmp_path, capsys) -> None:
    args = parse(["losses", *TINY, "--sizes", "2x8", "--variants", "grpo,nope", "--out", str(tmp_path)])
    assert bench.main(args) == 2
    assert "nope" in capsys.readouterr().err


def test_sizes_flag_rejects_malformed_value() -> None:
    with pytest.raises(SystemExit):
        parse(["vespo", "--sizes", "8by128"])


def test_parse_sizes() -> None:
    assert common.parse_sizes("8x128, 16X256,") == [(8, 128), (16, 256)]
    for bad in ("", "8x", "0x5", "8x128x2"):
        with pytest.raises(ValueError):
            common.parse_sizes(bad)


def test_markdown_table_keeps_cells_and_alignment() -> None:
    table = common.markdown_table(
        ["B x T", "ms", "note"], [["8 x 128", "6.570", "a"], ["2 x 4", "0.046", ""]], "lrl"
    )
    lines = table.splitlines()
    assert len(lines) == 4
    assert re.fullmatch(r"\|:-+\|-+:\|:-+\|", lines[1])
    assert table_rows(table) == [["B x T", "ms", "note"], ["8 x 128", "6.570", "a"], ["2 x 4", "0.046", ""]]


def test_timing_settings_override_and_validate() -> None:
    quick = common.PRESETS["quick"].timing
    assert quick.overridden(repeats=None, min_run_time=None) == quick
    assert quick.overridden(repeats=2, max_time=3.0) == common.TimingSettings(
        min_run_time=quick.min_run_time, repeats=2, block_time=quick.block_time, max_time=3.0
    )
    for bad in ({"repeats": 0}, {"min_run_time": 0.0}, {"block_time": -1.0}):
        with pytest.raises(ValueError):
            quick.overridden(**bad)


def test_time_side_by_side_counts_blocks_and_pairs_ratios() -> None:
    timing = common.TimingSettings(min_run_time=1e-4, repeats=3, block_time=1e-4)
    result = common.time_side_by_side(
        {"a": lambda: None, "b": lambda: sum(range(50))},
        device=torch.device("cpu"),
        timing=timing,
        num_threads=1,
        baseline="a",
    )
    assert list(result.timings) == ["a", "b"] and result.baseline == "a"
    assert all(t.blocks >= 3 and t.calls >= t.blocks for t in result.timings.values())
    assert result.ratios["a"] == 1.0 and result.ratio_quartiles["a"] == (1.0, 1.0)
    with pytest.raises(ValueError, match="baseline"):
        common.time_side_by_side(
            {"a": lambda: None}, device=torch.device("cpu"), timing=timing, num_threads=1, baseline="z"
        )


def test_presets() -> None:
    assert common.PRESETS["full"].sizes == common.REPORTED_SIZES
    assert len(common.REPORTED_SIZES) == 8
    assert set(common.PRESETS["quick"].sizes) <= set(common.REPORTED_SIZES)


def test_importing_bench_package_does_not_load_torch() -> None:
    code = "import sys, harness.bench; sys.exit('torch' in sys.modules or 'trl' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- the stand-in ------------------------------------------------------------------------------------------


def test_loss_variants_cover_trl_loss_types() -> None:
    import dataclasses

    from trl import GRPOConfig

    help_text = next(f.metadata["help"] for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type")
    listed = re.search(r"Supported values are (.*?)\.", help_text)
    assert listed is not None, "GRPOConfig.loss_type help no longer lists its values"
    trl_types = set(re.findall(r"'(\w+)'", listed.group(1)))
    assert trl_types == {v.loss_type for v in LOSS_VARIANTS.values()}
    assert trl_config_defaults()["loss_type"] in trl_types


@pytest.mark.parametrize("name", list(LOSS_VARIANTS))
def test_stand_in_runs_trl_loss_with_gradient(name: str) -> None:
    batch = make_loss_batch(4, 12, seed=3)
    probe = make_loss_stand_in(name, batch)
    loss = probe.loss(batch.inputs)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    grad = batch.per_token_logps.grad
    assert grad is not None and torch.isfinite(grad).all()
    padding = batch.inputs["completion_mask"] == 0
    assert (grad[padding] == 0).all()
    assert probe._metrics["train"]["entropy"]  # TRL logged its metrics through the stub accelerator


def test_stand_in_names_missing_attribute() -> None:
    batch = make_loss_batch(2, 4)
    probe = make_loss_stand_in("grpo", batch)
    with pytest.raises(AttributeError, match="stand-in"):
        _ = probe.some_future_trainer_attribute


def test_stand_in_rejects_unknown_config_field() -> None:
    with pytest.raises(ValueError, match="not GRPOConfig fields"):
        make_loss_stand_in("grpo", make_loss_batch(2, 4), epsilonn=0.1)


@pytest.mark.parametrize(
    "options",
    [
        {"beta": 0.04},
        {"top_entropy_quantile": 0.8},
        {"off_policy_mask_threshold": 0.5},
        {"entropy_coef": 0.01},
        {"use_adaptive_entropy": True, "entropy_coef": 0.01},
        {"delta": 1.5},
        {"gradient_accumulation_steps": 4, "training": False},
    ],
)
def test_stand_in_supports_optional_trl_paths(options: dict) -> None:
    batch = make_loss_batch(4, 12, seed=1)
    batch.inputs["ref_per_token_logps"] = batch.per_token_logps.detach() + 0.01
    for name in ("grpo", "vespo", "luspo"):
        loss = make_loss_stand_in(name, batch, **options).loss(batch.inputs)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(batch.per_token_logps.grad).all()
        batch.per_token_logps.grad = None


def test_kernel_defaults_match_trl_config() -> None:
    from harness.bench.vespo import DEFAULT_KERNEL

    defaults = trl_config_defaults()
    assert {name: defaults[f"vespo_{name}"] for name in DEFAULT_KERNEL} == DEFAULT_KERNEL
