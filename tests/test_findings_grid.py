"""The findings grid (ablations/findings.yaml): every claim is stated in full, and its quick profile
runs end to end through the CLI on the tiny-steps testbed into a findings table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import cli

from harness import layout
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.models.tasks import LENGTH_CORRECT, LENGTH_INCORRECT

REPO = Path(__file__).resolve().parent.parent
GRID = REPO / "ablations" / "findings.yaml"
VERDICTS = ("reproduced", "opposite", "not resolved", "not enough runs")


def test_every_finding_names_its_claim_paper_metric_window_and_baseline():
    plan = expand(load_grid(GRID))
    ids = set(plan.grid.findings)
    assert {"F0_clip_under_reuse", "F1_clip_higher", "F2_length_bias", "F4_reference_sync"} <= ids
    assert {i for i in ids if i.startswith("F3_")} == {"F3_staleness_vespo", "F3_staleness_gspo"}
    assert {i for i in ids if i.startswith("F5_")} == {"F5_cannot_learn", "F5_harmed"}
    assert {i for i in ids if i.startswith("F6_")} == {"F6_epoch_sync"}
    for fid, f in plan.grid.findings.items():
        assert len(f["claim"]) > 40, fid
        if not fid.startswith("F5"):
            assert re.search(r"arXiv:\d{4}\.\d{5}", f["paper"]) and "§" in f["paper"], fid
            assert f["scaled"], fid  # what was scaled from the paper's setting
        assert f["window"] == [0.5, 1.0] and f["direction"] in ("higher", "lower")
        assert (f["baseline"] and f["variant"]) if "dose" not in f else f["select"], fid
    by_metric = {fid: f["metric"] for fid, f in plan.grid.findings.items()}
    assert by_metric["F1_clip_higher"] == "entropy"
    assert (
        plan.grid.findings["F1_clip_higher"]["dose"]["key"] == "trainer.epsilon_high"
    )  # read as a dose-response
    assert by_metric["F2_length_bias"] == LENGTH_INCORRECT
    # the testbed is the grid's default; the completion budget sits well above a chain's length
    run = plan.runs[0]
    assert run.model == "tiny-steps" and run.task.template == "steps"
    assert run.get("trainer.max_completion_length") >= 64


@pytest.mark.slow
def test_quick_profile_runs_into_a_findings_table(tmp_path, model_cache):
    results = tmp_path / "results"
    # the quick profile, shortened to what the pipeline needs: 2 steps, eval at the start and at
    # step 2 on 24 prompts, 16 completions a step (2 prompts x 8; a generation of 64 where
    # steps_per_generation is 4). The runs are nearly all steps: about 1 CPU-second each here.
    steps = 2
    cli(
        "run", str(GRID), "--profile", "quick", "--results", str(results),
        "-o", f"trainer.max_steps={steps}", "-o", "harness.eval_steps=2", "-o", "task.eval_size=24",
        "-o", "trainer.per_device_train_batch_size=16", timeout=1800,
    )  # fmt: skip
    grid_dir = results / "findings"
    runs = sorted((grid_dir / layout.RUNS_DIR).iterdir())
    assert len(runs) == 30 and all((d / layout.DONE_FILE).exists() for d in runs)
    lengths = []
    for d in runs:
        df = pq.read_table(d / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
        assert list(df["step"]) == list(range(1, steps + 1))
        assert "completions/clipped_ratio" in df  # truncation is recorded
        # a step without a correct (or incorrect) completion has no length of that kind; a run of
        # 4 steps of 2 prompts may have none at all
        lengths += [v for col in (LENGTH_CORRECT, LENGTH_INCORRECT) if col in df for v in df[col].dropna()]
    # worked chains of tens of tokens, eos included
    assert lengths and 10 < sum(lengths) / len(lengths) < 50
    out = cli("findings", str(grid_dir), "--markdown").stdout
    table = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("|")]
    header, rows = [c.strip() for c in table[0]], table[2:]
    assert len(rows) == 9, out
    for row in rows:
        assert any(v in row[header.index("verdict")] for v in VERDICTS), row
    index = (grid_dir / layout.REPORT_DIR / "index.md").read_text()
    assert "Findings" in index and "F2_length_bias" in json.dumps(
        json.loads((grid_dir / layout.GRID_FILE).read_text())
    )
    assert "cannot be resolved" in index  # the power line of the final-performance table
