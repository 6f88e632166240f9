"""Timings that hold under load: the step clock's arithmetic (on fake counters), the loaded-step
rule, the timing table's measure and left-out rows, its caption, and the off-step file work
(background metric parts, throttled progress.json)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import report, timing
from harness import layout
from harness.layout import read_metrics
from harness.train import metrics, recorder
from harness.train.metrics import MetricsWriter, StepClock

ROOT = Path(__file__).resolve().parents[1]


class FakeMachine:
    """Counters the step clock reads, advanced by hand."""

    def __init__(self, monkeypatch):
        self.wall = self.cpu = self.busy = self.stall_us = 0.0
        self.procs: dict[int, float] = {}
        monkeypatch.setattr(metrics.time, "perf_counter", lambda: self.wall)
        monkeypatch.setattr(metrics.time, "process_time", lambda: self.cpu)
        monkeypatch.setattr(metrics, "_machine_busy_s", lambda: self.busy)
        monkeypatch.setattr(metrics, "_cpu_stall_us", lambda: self.stall_us)
        monkeypatch.setattr(
            metrics, "_process_cpu_s", lambda pids: {p: self.procs[p] for p in pids if p in self.procs}
        )

    def advance(self, wall, cpu, busy, stall_s=0.0, **procs):
        self.wall += wall
        self.cpu += cpu
        self.busy += busy
        self.stall_us += stall_s * 1e6
        for pid, used in procs.items():
            self.procs[int(pid[1:])] = self.procs.get(int(pid[1:]), 0.0) + used


def test_step_clock_counts_steps_not_the_gaps_between_intervals(monkeypatch):
    m = FakeMachine(monkeypatch)
    m.procs = {1: 0.0, 2: 0.0}
    clock = StepClock("cpu", harness_pids=lambda: [2], refresh_s=0.0)
    monkeypatch.setattr(metrics.os, "getpid", lambda: 1)
    clock.start()
    m.advance(wall=2.0, cpu=1.0, busy=4.0, stall_s=0.5, p1=1.0, p2=1.0)  # 2 s of other cores' work
    clock.stop()
    clock.step_done()
    m.advance(wall=2.0, cpu=50.0, busy=2.0, p1=2.0)  # an eval between stop and start: not the step's time
    clock.start()
    m.advance(wall=2.0, cpu=1.0, busy=2.0, p1=1.0, p2=1.0)  # the harness alone
    clock.stop()
    clock.step_done()
    got = clock.take()
    assert got[layout.STEP_WALL_S] == pytest.approx(2.0)
    assert got[layout.STEP_CPU_S] == pytest.approx(1.0)
    # the machine is a rate over all the time read (the eval's included): 2 other CPU seconds in 6 s
    assert got[layout.OTHER_CPUS] == pytest.approx(2.0 / 6.0)
    assert got[layout.CPU_STALL] == pytest.approx(0.5 / 6.0)
    assert layout.STEP_GPU_S not in got  # a CPU run records no GPU time
    assert clock.take()[layout.STEP_CPU_S] == 0.0  # reset after take


def test_a_harness_run_that_starts_mid_step_is_not_counted_as_ours(monkeypatch):
    m = FakeMachine(monkeypatch)
    monkeypatch.setattr(metrics.os, "getpid", lambda: 1)
    pids = [[]]
    clock = StepClock("cpu", harness_pids=lambda: pids[0], refresh_s=0.0)
    m.procs = {1: 0.0}
    clock.start()  # the machine's first read
    m.procs[7] = 100.0  # a run whose lease appears now, with CPU time from before this step
    pids[0] = [7]
    m.advance(wall=1.0, cpu=1.0, busy=1.5, p1=1.0, p7=0.5)
    clock.stop()
    clock.step_done()
    assert clock.take()[layout.OTHER_CPUS] == pytest.approx(0.5)  # not 1.5 - 101: only pids in both samples


def test_without_proc_the_machine_columns_are_left_out(monkeypatch):
    m = FakeMachine(monkeypatch)
    monkeypatch.setattr(metrics, "_machine_busy_s", lambda: None)
    monkeypatch.setattr(metrics, "_cpu_stall_us", lambda: None)
    clock = StepClock("cpu")
    clock.start()
    m.advance(wall=1.0, cpu=0.5, busy=0.0)
    clock.stop()
    clock.step_done()
    got = clock.take()
    assert layout.OTHER_CPUS not in got and layout.CPU_STALL not in got
    assert got[layout.STEP_CPU_S] == pytest.approx(0.5)


def _frame(spec: dict) -> pd.DataFrame:
    parts = []
    for rid, (lt, cols) in spec.items():
        n = len(next(iter(cols.values())))
        part = pd.DataFrame({"run_id": rid, "step": np.arange(1, n + 1), **cols})
        part["loss_type"] = lt
        parts.append(part)
    df = pd.concat(parts, ignore_index=True)
    df["run_id"] = df["run_id"].astype("category")
    return df


def test_loaded_steps_compare_other_work_with_the_cores_the_harness_left_free():
    df = pd.DataFrame(
        {
            layout.OTHER_CPUS: [0.2, 0.8, 0.8, 1.6, math.nan],
            layout.CPUS: [2.0, 2.0, 2.0, 2.0, 2.0],
            layout.CONCURRENT_RUNS: [2.0, 2.0, 1.0, 1.0, 1.0],
            layout.RUN_THREADS: [1.0, 1.0, 1.0, 1.0, 1.0],
        }
    )
    # free cores: 0, 0, 1, 1; loaded above free + LOAD_MARGIN_CPUS (0.5); unknown: not loaded
    assert timing.LOAD_MARGIN_CPUS == 0.5
    assert timing.loaded_steps(df).tolist() == [False, True, False, True, False]


def _timed(cpu_g, cpu_d, other_g, other_d, wall=(1.0, 1.0)):
    cols = {layout.CPUS: [2.0, 2.0], layout.CONCURRENT_RUNS: [2.0, 2.0], layout.RUN_THREADS: [1.0, 1.0]}
    return _frame(
        {
            "g": ("grpo", {layout.STEP_WALL_S: list(wall), layout.STEP_CPU_S: cpu_g, layout.OTHER_CPUS: other_g, **cols}),
            "d": ("dapo", {layout.STEP_WALL_S: [4.0, 4.0], layout.STEP_CPU_S: cpu_d, layout.OTHER_CPUS: other_d, **cols}),
        }
    )  # fmt: skip


def test_speedup_is_from_cpu_time_over_quiet_steps():
    # dapo's wall time is 4x grpo's, its CPU time half: the speedup follows CPU time; grpo's loaded
    # second step (CPU 9.0) is left out of its mean, and grpo keeps half its steps: it stays in
    table = timing.timing_table(_timed([1.0, 9.0], [0.5, 0.5], [0.0, 1.5], [0.0, 0.0]))
    t = table.frame.set_index("loss_type")
    assert table.measure == layout.STEP_CPU_S and table.load_known
    assert t.loc["dapo", "speedup"] == pytest.approx(2.0)
    assert t.loc["grpo", "loaded"] == pytest.approx(0.5) and table.left_out == ()
    assert t.loc["grpo", "cpu_s_per_step"] == pytest.approx(5.0)  # the shown mean keeps every step
    assert table.display["speedup"] == "speedup vs grpo (CPU time)"


def test_rows_measured_mostly_under_load_get_no_speedup():
    table = timing.timing_table(_timed([1.0, 1.0], [0.5, 0.5], [0.0, 0.0], [1.5, 1.5]))
    t = table.frame.set_index("loss_type")
    assert math.isnan(t.loc["dapo", "speedup"]) and t.loc["grpo", "speedup"] == 1.0
    assert table.left_out == (("dapo", 1.0),)
    caption = report.load_caption(table)
    assert "Left out of the speedup" in caption and "dapo (100% of its steps loaded)" in caption
    # a loaded baseline takes every speedup of its panel with it
    t = timing.timing_table(_timed([1.0, 1.0], [0.5, 0.5], [1.5, 1.5], [0.0, 0.0])).frame
    assert t["speedup"].isna().all()


def test_older_results_fall_back_to_wall_time_with_a_note():
    df = _timed([1.0, 1.0], [0.5, 0.5], [0.0, 0.0], [0.0, 0.0], wall=(2.0, 2.0))
    old = df.drop(columns=[layout.STEP_CPU_S, layout.OTHER_CPUS, layout.CPUS, layout.RUN_THREADS])
    table = timing.timing_table(old)
    t = table.frame.set_index("loss_type")
    assert table.measure == layout.STEP_WALL_S and not table.load_known
    assert t.loc["dapo", "speedup"] == pytest.approx(0.5)  # 2.0 / 4.0 wall
    assert "cpu_s_per_step" not in t.columns and "loaded" not in t.columns
    assert "from wall time" in report.load_caption(table)


def test_gpu_time_is_the_measure_when_recorded():
    df = _timed([1.0, 1.0], [0.5, 0.5], [0.0, 0.0], [0.0, 0.0])
    df[layout.STEP_GPU_S] = np.where(df["loss_type"] == "grpo", 3.0, 1.0)
    table = timing.timing_table(df)
    t = table.frame.set_index("loss_type")
    assert table.measure == layout.STEP_GPU_S and t.loc["dapo", "speedup"] == pytest.approx(3.0)
    assert "GPU time" in report.load_caption(table)


def test_background_parts_are_written_in_order_and_flush_waits(tmp_path):
    w = MetricsWriter(tmp_path, "r", flush_every=2, background=True)
    for s in range(1, 8):
        w.append({"step": s, "reward": float(s)})
    w.flush()  # waits for the background parts, writes step 7 itself
    parts = sorted((tmp_path / layout.METRICS_DIR).glob("part-*.parquet"))
    assert len(parts) == 4
    assert read_metrics(tmp_path).column("step").to_pylist() == list(range(1, 8))
    w.compact()
    assert [p.name for p in (tmp_path / layout.METRICS_DIR).iterdir()] == [layout.COMPACT_FILE]


def test_a_failed_background_write_is_raised(tmp_path, monkeypatch):
    def fail(table, path):
        raise OSError("disk full")

    monkeypatch.setattr(metrics, "_atomic_write_table", fail)
    w = MetricsWriter(tmp_path, "r", flush_every=1, background=True)
    w.append({"step": 1})
    with pytest.raises(OSError, match="disk full"):
        w.wait()


def test_progress_json_is_rewritten_at_most_every_few_seconds(tmp_path, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(recorder.time, "monotonic", lambda: now[0])
    rec = recorder._StepRecorder.__new__(recorder._StepRecorder)
    rec.writer, rec.max_steps, rec._recent, rec._reward = object(), 10, [], None
    rec._progress_at, rec.samples_path = -math.inf, tmp_path / layout.SAMPLES_FILE

    def step(n, force=False):
        rec._write_progress({layout.STEP: n, layout.STEP_WALL_S: 0.1, "reward": 0.5}, force=force)
        return layout.read_progress(tmp_path)["step"]

    assert step(1) == 1  # the first step is written at once
    assert step(2) == 1  # too soon
    assert step(3, force=True) == 3  # a checkpoint comes next
    now[0] += recorder.PROGRESS_EVERY_S
    assert step(4) == 4
    assert step(10) == 10  # the last step always


def test_load_benchmark_verdict_flags_a_reported_speedup_outside_the_quiet_spread():
    spec = importlib.util.spec_from_file_location("load_bench", ROOT / "benchmarks" / "load.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def row(variant, reported, ci=(0.9, 1.1)):
        return {
            "variant": variant,
            "wall": 1.0,
            "cpu": 1.0,
            "cpu_ci": ci,
            "wall_ci": ci,
            "loaded": 0.0,
            "reported": reported,
        }

    quiet = ("quiet-1", [row("grpo", 1.0), row("dapo", 1.0)])
    held = bench.verdict([quiet, ("hogged-1", [row("grpo", 1.0), row("dapo", math.nan)])], "grpo")
    assert held[-1] == "verdict: every reported speedup holds" and "left out" in held[-2]
    broke = bench.verdict([quiet, ("hogged-1", [row("grpo", 1.0), row("dapo", 2.24)])], "grpo")
    assert broke[-1] == "verdict: a reported speedup is outside" and "OUTSIDE" in broke[-2]


def _recorder_for_save(monkeypatch, mark):
    from types import SimpleNamespace

    from harness.train import checkpoints

    monkeypatch.setattr(checkpoints, "mark_complete", mark)
    monkeypatch.setattr(checkpoints, "prune", lambda folder, keep: [])
    rec = recorder._StepRecorder.__new__(recorder._StepRecorder)
    rec.trainer, rec.settings = SimpleNamespace(), SimpleNamespace(keep_checkpoints=2)
    rec._marking, rec._marking_error = None, None
    state = SimpleNamespace(global_step=4, is_world_process_zero=True)
    return rec, state


def test_a_checkpoint_is_marked_off_the_step_and_waited_for(tmp_path, monkeypatch):
    marked = []
    rec, state = _recorder_for_save(monkeypatch, lambda ckpt, step: marked.append((ckpt.name, step)))
    args = type("Args", (), {"output_dir": str(tmp_path), "save_total_limit": None})()
    rec.on_save(args, state, None)
    rec.on_train_end(args, state, None)  # training's end waits for the marker
    assert marked == [("checkpoint-4", 4)] and rec._marking is None


def test_a_failed_marker_is_raised_on_the_training_thread(tmp_path, monkeypatch):
    def full(ckpt, step):
        raise OSError(28, "No space left on device")

    rec, state = _recorder_for_save(monkeypatch, full)
    args = type("Args", (), {"output_dir": str(tmp_path), "save_total_limit": None})()
    rec.on_save(args, state, None)
    with pytest.raises(OSError, match="No space left"):
        rec.finish_marking()
    rec.finish_marking()  # raised once


def test_steps_between_reads_of_the_machine_get_its_latest_rates(monkeypatch):
    m = FakeMachine(monkeypatch)
    monkeypatch.setattr(metrics.os, "getpid", lambda: 1)
    m.procs = {1: 0.0}
    clock = StepClock("cpu", machine_every_s=1.0)
    clock.start()
    m.advance(wall=1.0, cpu=0.5, busy=1.5, p1=0.5)  # a read: 1 other core
    clock.stop()
    clock.step_done()
    assert clock.take()[layout.OTHER_CPUS] == pytest.approx(1.0)
    clock.start()
    m.advance(wall=0.2, cpu=0.2, busy=0.2, p1=0.2)  # too soon for a read: the latest rate
    clock.stop()
    clock.step_done()
    got = clock.take()
    assert got[layout.OTHER_CPUS] == pytest.approx(1.0) and got[layout.STEP_CPU_S] == pytest.approx(0.2)
