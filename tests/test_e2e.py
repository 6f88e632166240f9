"""End to end through the CLI: a 2-run grid with the local executor, and the smoke grid itself."""

import json

import pyarrow.parquet as pq
import pytest
from helpers import FAST_TINY, cli

from harness import layout
from harness.layout import WSEQ_COLUMNS

FAST = [f"-otiny.{k}={v}" for k, v in FAST_TINY.items()] + ["-otask.train_size=256"]


def run_dirs(grid_dir):
    return sorted((grid_dir / layout.RUNS_DIR).iterdir())


@pytest.mark.slow
def test_two_run_grid_through_cli(tmp_path, model_cache):
    results = tmp_path / "results"
    args = [
        "ablations/smoke.yaml",
        "--results",
        str(results),
        *FAST,
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo, vespo]",
        "-otrainer.max_steps=4",
        "-oharness.eval_steps=2",
        "-oharness.samples_steps=2",
    ]
    proc = cli("run", *args)
    grid_dir = results / "smoke"
    assert f"results in {grid_dir}" in proc.stdout
    dirs = run_dirs(grid_dir)
    assert len(dirs) == 2
    grid = json.loads((grid_dir / layout.GRID_FILE).read_text())
    assert sorted(grid["run_ids"]) == [d.name for d in dirs]
    for d in dirs:
        assert (d / layout.DONE_FILE).exists()
        assert list((d / layout.METRICS_DIR).iterdir()) == [d / layout.METRICS_DIR / layout.COMPACT_FILE]
        df = pq.read_table(d / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
        assert list(df["step"]) == [1, 2, 3, 4]
        assert set(WSEQ_COLUMNS) <= set(df.columns)
        assert df["eval/accuracy"].notna().sum() == 2  # steps 2 and 4
        assert df["w_seq/max"].max() != 1.0 or df["w_seq/min"].min() != 1.0  # num_iterations = 2
        config = json.loads((d / layout.CONFIG_FILE).read_text())
        assert config["run_id"] == d.name and config["config"]["trainer"]["num_iterations"] == 2
        prov = json.loads((d / layout.PROVENANCE_FILE).read_text())
        assert prov["trl"] and prov["torch"] and prov["device"] == "cpu"
        samples = [json.loads(x) for x in (d / layout.SAMPLES_FILE).read_text().splitlines()]
        assert {s["step"] for s in samples} == {2, 4} and "completion" in samples[0]
        assert list((d / layout.LOGS_DIR).rglob("*.err"))  # submitit's per-job log
    report = grid_dir / layout.REPORT_DIR
    assert (report / "index.md").exists()
    assert list(report.glob("*.png")) and list(report.glob("*.pdf"))
    assert list(report.glob("*timing*.md")) and list(report.glob("*timing*.csv"))

    # re-running skips finished runs
    proc = cli("run", *args, "--no-report")
    assert "skipped 2 run(s): done" in proc.stdout
    assert "nothing to run" in proc.stdout


@pytest.mark.slow
def test_smoke_grid_at_reduced_steps(tmp_path, model_cache):
    """The README's main command, with fewer steps and a shorter warm start."""
    results = tmp_path / "results"
    proc = cli("run", "ablations/smoke.yaml", "--results", str(results), *FAST, "-otrainer.max_steps=4")
    dirs = run_dirs(results / "smoke")
    assert len(dirs) == 9
    loss_types = set()
    for d in dirs:
        assert (d / layout.DONE_FILE).exists(), d
        df = pq.read_table(d / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
        assert list(df["step"]) == [1, 2, 3, 4]
        loss_types.add(json.loads((d / layout.CONFIG_FILE).read_text())["config"]["trainer"]["loss_type"])
    assert loss_types == {"grpo", "dapo", "vespo"}
    assert "9/9 run(s) finished" in proc.stdout
    assert (results / "smoke" / layout.REPORT_DIR / "index.md").exists()


@pytest.mark.slow
def test_two_processes_per_run(tmp_path, model_cache):
    """tasks_per_node = 2: one run, two CPU processes (gloo), completions gathered from both ranks,
    files written once (by rank 0)."""
    results = tmp_path / "results"
    cli(
        "run",
        "ablations/smoke.yaml",
        "--results",
        str(results),
        *FAST,
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo]",
        "-otrainer.max_steps=4",
        "-otrainer.per_device_train_batch_size=16",
        "-oexecutor.tasks_per_node=2",
        "-oharness.eval_steps=2",
        "--no-report",
    )
    (run_dir,) = run_dirs(results / "smoke")
    df = pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()
    assert list(df["step"]) == [1, 2, 3, 4]
    assert (df["w_seq/n"] + df["w_seq/n_masked"] == 2 * 16).all()  # both ranks' completions
    (attempt,) = layout.read_attempts(run_dir)  # rank 0 alone writes: one start, one end record
    assert (
        attempt["outcome"] == "done" and len((run_dir / layout.ATTEMPTS_FILE).read_text().splitlines()) == 2
    )
    logs = sorted(p.name for p in (run_dir / layout.LOGS_DIR).glob("*_log.out"))
    assert len(logs) == 2  # one per task


@pytest.mark.slow
def test_status_and_cancel_survive_damaged_run_files(tmp_path):
    """Every run file damaged a different way: status lists them all, cancel runs; no traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    grid = tmp_path / "results" / "g"
    damage = {
        "a": {layout.CONFIG_FILE: b"[1, 2]"},
        "b": {layout.CONFIG_FILE: b'{"varying": [1]}', layout.JOB_FILE: b'{"job_id": 5}'},
        "c": {layout.FAILED_FILE: b"[1]", layout.JOB_FILE: b"[1]"},
        "d": {layout.OWNER_FILE: b"[1]", layout.CONFIG_FILE: b'{"varying": {}}'},
        "e": {layout.CONFIG_FILE: b"\xff\xfe not utf-8", layout.JOB_FILE: b"\xff\xfe"},
        "f": {},
        "g": {layout.JOB_FILE: b'{"job_id": "999999_0", "stderr": 5}'},
        "h": {layout.JOB_FILE: b'{"job_id": "999998_0", "stderr": "LOG"}'},
        "i": {layout.CONFIG_FILE: b'{"varying": {}}'},
        "j": {layout.OWNER_FILE: b'{"host": "HOST", "pid": 0}', layout.CONFIG_FILE: b'{"varying": {}}'},
    }
    import socket

    log = tmp_path / "cut.log"
    log.write_bytes(b"Traceback\nValueError: boom \xf0\x9f")  # cut inside a 4-byte character
    damage["h"][layout.JOB_FILE] = damage["h"][layout.JOB_FILE].replace(b"LOG", str(log).encode())
    damage["j"][layout.OWNER_FILE] = damage["j"][layout.OWNER_FILE].replace(
        b"HOST", socket.gethostname().encode()
    )
    for rid, files in damage.items():
        rdir = grid / layout.RUNS_DIR / rid
        rdir.mkdir(parents=True)
        for name, data in files.items():
            (rdir / name).write_bytes(data)
    (grid / layout.RUNS_DIR / "f" / layout.METRICS_DIR).mkdir()
    pq.write_table(
        pa.table({"reward": [1.0]}), grid / layout.RUNS_DIR / "f" / layout.METRICS_DIR / "part-000001.parquet"
    )
    (grid / layout.RUNS_DIR / "i" / layout.METRICS_DIR).mkdir()
    pq.write_table(
        pa.table({"step": [1, 2], "reward": ["a", "b"]}),
        grid / layout.RUNS_DIR / "i" / layout.METRICS_DIR / "part-000001.parquet",
    )
    ids = list(damage)
    (grid / layout.GRID_FILE).write_text(json.dumps({"run_ids": ids, "runs": {"a": {"loss_type": "grpo"}}}))
    proc = cli("status", str(grid))
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    rows = {line.split()[0]: line for line in lines[1 : len(ids) + 1]}
    assert list(rows) == ids
    assert "running" not in rows["j"]  # pid 0 is no process
    assert "ValueError: boom" in proc.stdout  # the cut log's error line, read despite the bad byte
    assert '"grpo"' in proc.stdout.splitlines()[1]  # run a: its planned values from grid.json
    assert cli("cancel", str(grid)).returncode == 0
    (grid / layout.GRID_FILE).unlink()
    (grid / layout.GRID_FILE).mkdir()
    proc = cli("status", str(grid), check=False)
    assert proc.returncode == 2 and "is not a grid file" in proc.stderr and "Traceback" not in proc.stderr
