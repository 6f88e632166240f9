"""benchmarks/gpu_check.sh on its CPU path: every stage runs and the tables say what the GPU check reports.

The same script, at tiny sizes (a 2-layer model of Qwen2's family with the tiny-chat tokenizer, 4 steps
per loss type, 8 completions of up to 48 tokens, the short VESPO benchmark), into a temporary folder:
never into results/reference/gpu/. About two minutes on 2 cores. No wall-clock assertion.
"""

from __future__ import annotations

import csv
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import module_command

REPO = Path(__file__).resolve().parent.parent
TRAINING_COLUMNS = {
    "loss_type",
    "steps",
    "s_per_step",
    "first_step_s",
    "generated_tokens_per_s",
    "trained_tokens_per_s",
    "peak_memory_mib",
    "wseq_offpolicy_min",
    "wseq_offpolicy_max",
    "wseq_moves",
    "num_iterations",
    "device",
    "machine",
    "torch",
    "transformers",
    "trl",
}
WSEQ_COLUMNS = {"loss_type", "step", "reuse_index", "time/step_s", "w_seq/mean", "w_seq/min", "w_seq/max"}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def forking_python(folder: Path) -> tuple[Path, dict[str, str]]:
    """An executable for the script's ``PYTHON`` that runs ``-m MODULE ...`` (its ``bench vespo``
    and ``grpo-harness run`` stages) forked from the test session's preloaded interpreter
    (helpers.module_command), and anything else (a script, ``-c``) with this Python, and the
    environment that names the session's socket."""
    command, env = module_command("MODULE")
    prefix = " ".join(shlex.quote(c) for c in command[: command.index("MODULE")])
    wrapper = folder / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ]; then shift; exec {prefix} "$@"; fi\n'
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, env


@pytest.fixture(scope="module")
def cpu_check(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The CPU path run once: (the finished process, the tables' folder)."""
    root = tmp_path_factory.mktemp("gpu-check")
    out = root / "tables"
    python, env = forking_python(root)
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--device", "cpu", "--out", str(out)]
        + ["--work", str(root / "work")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**env, "PYTHON": str(python)},
    )
    return proc, out


@pytest.mark.slow
def test_cpu_path_runs_every_stage(cpu_check, summary):
    proc, out = cpu_check
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for stage in ("environment", "bench vespo", "build model", "grpo-harness run", "tables"):
        assert f"=== {stage}: exit 0" in proc.stdout, stage
    assert "imports: ok" in proc.stdout
    names = {p.name for p in out.iterdir()}
    assert names == {f"{stem}.{ext}" for stem in ("training", "wseq", "vespo") for ext in ("md", "csv")} | {
        "index.md"
    }
    assert not any((REPO / "results" / "reference" / "gpu").glob("*.csv")), (
        "the CPU path wrote reference tables"
    )
    summary(proc.stdout.splitlines()[-1])


@pytest.mark.slow
def test_training_table_has_sane_values(cpu_check, summary):
    _, out = cpu_check
    rows = _rows(out / "training.csv")
    assert [r["loss_type"] for r in rows] == ["grpo", "dapo", "vespo"]
    for row in rows:
        assert set(row) >= TRAINING_COLUMNS, TRAINING_COLUMNS - set(row)
        assert int(row["steps"]) == 4
        assert float(row["s_per_step"]) > 0
        assert float(row["generated_tokens_per_s"]) > 0
        assert float(row["peak_memory_mib"]) > 0
        assert row["num_iterations"] == "2"
        assert row["device"] == "cpu" and row["torch"] and row["trl"]
        assert row["wseq_moves"] == "True"
        summary(
            f"{row['loss_type']}: {float(row['s_per_step']):.3f} s/step, w_seq on pass 2 in "
            f"[{float(row['wseq_offpolicy_min']):.6f}, {float(row['wseq_offpolicy_max']):.6f}]"
        )
    text = (out / "training.md").read_text()
    assert "| loss_type" in text and "w_seq moves" in text and "trl 1." in text


@pytest.mark.slow
def test_wseq_is_one_on_policy_and_moves_off_policy(cpu_check):
    _, out = cpu_check
    rows = _rows(out / "wseq.csv")
    assert set(rows[0]) >= WSEQ_COLUMNS
    assert len(rows) == 12  # 3 loss types x 4 steps
    for row in rows:
        low, high = float(row["w_seq/min"]), float(row["w_seq/max"])
        if row["reuse_index"] == "1.0":  # first pass over the generation batch: on-policy, exactly 1
            assert low == high == 1.0, row
        else:
            assert row["reuse_index"] == "2.0", row
            assert low != 1.0 or high != 1.0, row
            assert 0.5 < low <= high < 2.0, row
    assert {r["reuse_index"] for r in rows} == {"1.0", "2.0"}


@pytest.mark.slow
def test_vespo_table_passed_the_equivalence_check(cpu_check):
    _, out = cpu_check
    text = (out / "vespo.md").read_text()
    agreement = re.search(
        r"agreement \(float32, checked before timing\): largest relative difference (\S+)", text
    )
    assert agreement is not None, text
    assert float(agreement.group(1)) <= 1e-5
    assert "reported (PR #5199)" in text and "1.19-1.25x" in text
    rows = _rows(out / "vespo.csv")
    assert {(r["B"], r["T"], r["is_ratio"]) for r in rows} == {
        (b, t, i) for b, t in (("8", "128"), ("32", "512")) for i in ("0", "1")
    }
    for row in rows:
        assert float(row["trl_ms"]) > 0 and float(row["reference_ms"]) > 0
        assert row["reported_low"] == "1.19" and row["reported_high"] == "1.25"
