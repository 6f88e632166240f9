"""analysis.load: one frame over runs with different metric sets, damaged files skipped."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import config_for, write_grid, write_metrics, write_run

from analysis import load
from analysis.load import LoadInfo, SkippedFileWarning, flatten_config, load_results
from harness import layout


def _load_with_info(*args, **kwargs) -> tuple[pd.DataFrame, LoadInfo]:
    """:func:`analysis.load.load_results` as ``(frame, info)``."""
    loaded = load_results(*args, **kwargs)
    return loaded.frame, loaded.info


def _cols(steps, **metrics):
    return {layout.STEP: list(steps), **{k.replace("__", "/"): v for k, v in metrics.items()}}


@pytest.fixture
def mixed_grid(tmp_path):
    """Run "a-vespo" (listed and written first) logs kl and phi_seq; "b-grpo" logs neither."""
    g = tmp_path / "grid"
    write_run(
        g,
        "a-vespo",
        config=config_for("vespo", 0, beta=0.04),
        varying={"trainer.loss_type": "vespo", "seed": 0},
        columns=_cols(
            [1, 2, 3], reward=[0.1, 0.2, 0.3], kl=[0.01, 0.02, 0.03], vespo__phi_seq_mean=[1.0, 0.9, 0.8]
        ),
    )
    write_run(
        g,
        "b-grpo",
        config=config_for("grpo", 0, beta=0.0),
        varying={"trainer.loss_type": "grpo", "seed": 0},
        columns=_cols([1, 2], reward=[0.5, 0.6], entropy=[1.0, 0.9]),
    )
    write_grid(g, ["a-vespo", "b-grpo"], ["trainer.loss_type", "seed"])
    return g


def test_union_of_columns_whatever_comes_first(mixed_grid):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no dtype/concat warnings either
        df = load(mixed_grid)
    assert len(df) == 3 + 2
    for col in ("reward", "kl", "vespo/phi_seq_mean", "entropy"):
        assert df[col].dtype == np.float64
    assert df[layout.STEP].dtype == np.int64
    grpo = df[df.run_id == "b-grpo"]
    vespo = df[df.run_id == "a-vespo"]
    assert grpo["kl"].isna().all() and grpo["vespo/phi_seq_mean"].isna().all()
    assert vespo["entropy"].isna().all()
    assert vespo["kl"].tolist() == [0.01, 0.02, 0.03]
    assert grpo["reward"].tolist() == [0.5, 0.6]


def test_union_in_reverse_order(mixed_grid):
    df = load(mixed_grid, ["b-grpo", "a-vespo"])
    assert {"kl", "vespo/phi_seq_mean", "entropy"} <= set(df.columns)
    assert len(df) == 5
    assert df.loc[df.run_id == "a-vespo", "kl"].notna().all()


def test_config_columns_and_aliases(mixed_grid):
    df, info = _load_with_info(mixed_grid)
    assert set(df["loss_type"].astype(str)) == {"vespo", "grpo"}
    assert (df["loss_type"].astype(str) == df["trainer.loss_type"].astype(str)).all()
    assert df["trainer.beta"].dtype == np.float64
    assert df["seed"].dtype == np.int64
    assert df["task.name"].astype(str).unique().tolist() == ["countdown"]
    assert info.aliases == {"loss_type": "trainer.loss_type"}
    assert info.varying == ("trainer.loss_type", "seed")
    assert df["report_to"].astype(str).unique().tolist() == ["[]"]


def test_missing_config_value_is_null_not_dropped(tmp_path):
    g = tmp_path / "grid"
    for lt in ("grpo", None):
        write_run(
            g,
            f"r-{lt}",
            config=config_for(lt, 0),
            varying={"trainer.loss_type": lt, "seed": 0},
            columns=_cols([1, 2], reward=[0.0, 1.0]),
        )
    df = load(g)
    assert len(df) == 4
    assert df["loss_type"].isna().sum() == 2


def test_truncated_file_is_skipped_and_named(tmp_path):
    g = tmp_path / "grid"
    write_run(g, "good", config=config_for("grpo", 0), varying={}, columns=_cols([1, 2], reward=[0.1, 0.2]))
    bad = write_run(
        g, "bad", config=config_for("dapo", 0), varying={}, columns=_cols([1, 2, 3], reward=[1, 2, 3])
    )
    path = bad / layout.METRICS_DIR / layout.COMPACT_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.warns(SkippedFileWarning, match="bad/metrics/metrics.parquet"):
        df, info = _load_with_info(g)
    assert len(df) == 2
    assert [p for p, _ in info.skipped] == [str(path)]
    assert "magic" in info.skipped[0][1].lower() or "parquet" in info.skipped[0][1].lower()


def test_damaged_compact_file_falls_back_to_parts(tmp_path):
    g = tmp_path / "grid"
    rdir = write_run(
        g,
        "r",
        config=config_for("grpo", 0),
        varying={},
        parts=[_cols([1, 2], reward=[0.1, 0.2]), _cols([3], reward=[0.3])],
    )
    (rdir / layout.METRICS_DIR / layout.COMPACT_FILE).write_bytes(b"PAR1 not really")
    with pytest.warns(SkippedFileWarning):
        df = load(g)
    assert df["reward"].tolist() == [0.1, 0.2, 0.3]


def test_parts_temporaries_and_compact_precedence(tmp_path):
    g = tmp_path / "grid"
    rdir = write_run(
        g,
        "r",
        config=config_for("grpo", 0),
        varying={},
        parts=[_cols([1, 2], reward=[0.1, 0.2]), _cols([3], reward=[0.3], entropy=[0.5])],
    )
    mdir = rdir / layout.METRICS_DIR
    (mdir / ".part-000003.parquet.abc").write_bytes(b"half-written")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = load(g)
    assert df["reward"].tolist() == [0.1, 0.2, 0.3]
    assert df["entropy"].isna().tolist() == [True, True, False]

    write_metrics(mdir / layout.COMPACT_FILE, "r", _cols([1, 2, 3, 4], reward=[1.0, 2.0, 3.0, 4.0]))
    df = load(g)
    assert df["reward"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert "entropy" not in df.columns


def test_repeated_step_keeps_last_written(tmp_path):
    g = tmp_path / "grid"
    write_run(
        g,
        "r",
        config=config_for("grpo", 0),
        varying={},
        parts=[_cols([1, 2, 3], reward=[0.1, 0.2, 0.3]), _cols([3, 4], reward=[9.0, 0.4])],
    )
    df = load(g)
    assert df[layout.STEP].tolist() == [1, 2, 3, 4]
    assert df["reward"].tolist() == [0.1, 0.2, 9.0, 0.4]


def test_columns_projection(mixed_grid):
    df, info = _load_with_info(mixed_grid, columns=["reward", "not_logged_anywhere", "trainer.epsilon"])
    metric_cols = set(info.metric_columns)
    assert metric_cols == {"reward", "not_logged_anywhere"}
    assert "kl" not in df.columns and "entropy" not in df.columns
    assert df["not_logged_anywhere"].isna().all() and df["not_logged_anywhere"].dtype == np.float64
    # Varying keys always come, constants only when named.
    assert {"loss_type", "trainer.loss_type", "seed", "trainer.beta", "trainer.epsilon"} <= set(df.columns)
    assert "task.name" not in df.columns
    assert info.constant_config["task.name"] == "countdown"


def test_run_subset_and_unknown_run(mixed_grid):
    with pytest.warns(UserWarning, match="nope"):
        df, info = _load_with_info(mixed_grid, ["b-grpo", "nope"])
    assert df.run_id.astype(str).unique().tolist() == ["b-grpo"]
    assert info.missing_runs == ("nope",)


def test_run_without_metrics_and_bad_config(tmp_path):
    g = tmp_path / "grid"
    write_run(g, "ok", config=config_for("grpo", 0), varying={}, columns=_cols([1], reward=[1.0]))
    write_run(g, "empty", config=config_for("grpo", 1), varying={})
    (layout.run_dir(g, "ok") / layout.CONFIG_FILE).write_text("{not json")
    with pytest.warns(SkippedFileWarning, match="config.json"):
        df, info = _load_with_info(g)
    # a run whose settings cannot be read cannot be attributed to a variant: left out, and named
    assert len(df) == 0
    assert list(info.damaged_runs) == ["ok"]
    assert "JSONDecodeError" in info.damaged_runs["ok"]


def test_no_runs_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path)


def test_flatten_config():
    assert flatten_config({"a": {"b": 1, "c": {"d": None}}, "e": [1, 2], "f": {}}) == {
        "a.b": 1,
        "a.c.d": None,
        "e": "[1, 2]",
    }
