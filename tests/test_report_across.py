"""One report from several results folders (analysis.report.across): two small fabricated grids
that differ in the model, named with --across (one report, the model as panels), or in a key
nobody named (refused before anything is written); and, slow, the smoke grid run through the CLI
on tiny and on tiny-chat."""

from __future__ import annotations

import argparse
import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import config_for, md_rows, write_grid, write_run
from helpers import FAST_TINY, cli

from analysis import report
from analysis.report import ReportError, ReportSettings, across, compute_report, make_report
from analysis.report.across import FOLDER, SOURCES_FILE
from analysis.report.across_inputs import load_inputs, report_section
from analysis.report.across_output import left_out_lines, out_folder, report_lines
from harness import layout

LOSSES = ("grpo", "dapo")
SEEDS = (0, 1, 2)
STEPS = 30


def fake_grid(
    folder: Path,
    model: str,
    *,
    losses=LOSSES,
    seeds=SEEDS,
    trainer: dict | None = None,
    sections: dict | None = None,
    task: str = "countdown",
    gain: float = 1.0,
) -> list[str]:
    """A finished grid of ``losses × seeds`` on ``model`` (the run ids are the same in every folder,
    as hashes of equal settings would be), reward rising ``gain`` times faster than the default;
    ``sections`` are added to each run's settings (``{"tiny": {...}}``)."""
    ids = []
    for loss in losses:
        for seed in seeds:
            rid = f"{loss}-s{seed}"
            rng = np.random.default_rng(zlib.crc32(f"{folder.name}{model}{rid}".encode()))
            step = np.arange(1, STEPS + 1)
            config = config_for(loss, seed, task=task)
            config["model"] = model
            config.update(sections or {})
            config["trainer"].update({"max_steps": STEPS, **(trainer or {})})
            write_run(
                folder,
                rid,
                config=config,
                varying={"trainer.loss_type": loss, "seed": seed},
                grid="smoke",
                columns={
                    layout.STEP: step,
                    "reward": 0.1 + gain * 0.01 * step + 0.01 * rng.standard_normal(STEPS),
                    "entropy": 1.0 - 0.01 * step,
                    layout.STEP_WALL_S: np.full(STEPS, 1.0),
                },
            )
            ids.append(rid)
    write_grid(
        folder,
        ids,
        ["trainer.loss_type", "seed"],
        name="smoke",
        runs={r: {"trainer.loss_type": r.split("-")[0], "seed": int(r[-1])} for r in ids},
    )
    return ids


@pytest.fixture
def two(tmp_path):
    """The smoke grid on tiny and on tiny-chat, in two folders both named ``smoke``, each model's
    warm start shortened in its own section."""
    a, b = tmp_path / "tiny" / "smoke", tmp_path / "chat" / "smoke"
    fake_grid(a, "tiny", sections={"tiny": {"sft_steps": 30}})
    fake_grid(b, "tiny-chat", sections={"tiny_chat": {"sft_steps": 30}}, gain=1.5)
    return a, b


def computed(folders, **kw):
    """What a report across ``folders`` computes (no drawing): ``(Comparison, ReportData)``."""
    c = across.compare(folders, **kw)
    settings = across.place(ReportSettings.merged(report_section(c)[0]), c)
    return c, compute_report(load_inputs(c, settings), settings, strict_keys=set(c.facets))


def _ids() -> list[str]:
    return [f"{loss}-s{seed}" for loss in LOSSES for seed in SEEDS]


def _main(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    report.add_arguments(parser)
    return report.main(parser.parse_args([str(x) for x in argv]))


def test_two_folders_differing_in_the_named_model_make_one_report_with_a_panel_per_model(
    two, tmp_path, capsys
):
    a, b = two
    assert _main(a, b, "--out", tmp_path / "cmp") == 2  # the model differs and nobody named it
    err = capsys.readouterr().err
    assert "report: the folders differ in 3 setting(s)" in err and "model = tiny in tiny/smoke" in err
    assert not (tmp_path / "cmp").exists()
    assert _main(a, b, "--across", "model", "--out", tmp_path / "cmp") == 0
    out = tmp_path / "cmp"
    assert f"report written to {out}/" in capsys.readouterr().out
    index = (out / "index.md").read_text()
    assert index.startswith("# Report: tiny/smoke vs chat/smoke (across model)")
    assert "compared by model (panels)" in index and "in panels by model" in index
    table = md_rows(index)
    assert ["tiny/smoke", f"`{a}`", "smoke", "tiny", "6", "0"] in table
    assert ["chat/smoke", f"`{b}`", "smoke", "tiny-chat", "6", "0"] in table
    final = pd.read_csv(out / "final_performance.csv")
    assert sorted(zip(final["variant"], final["panel"], final["runs"], strict=True)) == [
        ("dapo", "tiny", 3),
        ("dapo", "tiny-chat", 3),
        ("grpo", "tiny", 3),
        ("grpo", "tiny-chat", 3),
    ]
    # the baseline is matched within each panel: dapo is compared with grpo on the same model
    assert final.loc[final["variant"] == "dapo", "p_improve"].notna().all()
    assert final.loc[final["variant"] == "grpo", "p_improve"].isna().all()
    chat = final[final["panel"] == "tiny-chat"].set_index("variant")["mean"]
    tiny = final[final["panel"] == "tiny"].set_index("variant")["mean"]
    assert (chat > tiny).all()  # the faster-rising fake grid is drawn in its own panel
    runs = pd.read_csv(out / "learning_check_runs.csv")
    assert set(runs[layout.RUN_ID]) == {f"{g}/{r}" for g in ("tiny/smoke", "chat/smoke") for r in _ids()}
    assert {p.suffix for p in out.iterdir()} >= {".png", ".pdf", ".md", ".csv"}
    sources = json.loads((out / SOURCES_FILE).read_text())
    assert sources["across"] == ["model"]
    assert [f["label"] for f in sources["folders"]] == ["tiny/smoke", "chat/smoke"]
    assert sources["folders"][1]["runs"] == _ids() and sources["no_counterpart"] == {}
    for grid in (a, b):  # nothing of the report in the compared folders
        assert not (grid / layout.REPORT_DIR).exists()
    assert out_folder(out, [a, b]) == out  # its own earlier report may be replaced


def test_without_across_the_report_is_refused_naming_the_model_and_its_values(two, tmp_path):
    a, b = two
    with pytest.raises(ReportError) as e:
        make_report([a, b], out=tmp_path / "cmp")
    msg = str(e.value)
    assert "model = tiny in tiny/smoke; tiny-chat in chat/smoke" in msg
    assert "tiny_chat.sft_steps = (none) in tiny/smoke; 30 in chat/smoke" in msg
    assert msg.endswith("for instance: --across model")  # naming the model covers its own section
    assert not (tmp_path / "cmp").exists()


def test_a_key_that_differs_unnamed_is_refused_before_anything_is_read_or_written(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    fake_grid(a, "tiny")
    fake_grid(b, "tiny-chat", trainer={"learning_rate": 1e-4})
    with pytest.raises(ReportError) as e:
        make_report([a, b], across="model", out=tmp_path / "cmp")
    msg = str(e.value)
    assert "trainer.learning_rate = (none) in a; 0.0001 in b" in msg
    assert "(none): the runs do not set the key" in msg
    assert "--across model --allow-different trainer.learning_rate" in msg
    assert "model =" not in msg  # the named key is not refused
    assert not (tmp_path / "cmp").exists()
    assert not (a / layout.GRID_CACHE_DIR).exists() and not (b / layout.GRID_CACHE_DIR).exists()

    c = across.compare([a, b], across=["model"], allow_different=["learning_rate"])
    assert [d.key for d in c.allowed] == ["trainer.learning_rate"] and c.facets == ("model",)
    lines = "\n".join(report_lines(c))
    assert "allowed with `--allow-different`" in lines
    assert "trainer.learning_rate = (none) in a; 0.0001 in b" in lines


def test_runs_without_a_counterpart_are_left_out_and_listed(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    fake_grid(a, "tiny", losses=("grpo", "dapo", "vespo"))
    fake_grid(b, "tiny-chat", seeds=(0, 1))
    c, data = computed([a, b], across=["model"])
    assert left_out_lines(c) == [
        f"`a/vespo-s{seed}`: no counterpart (trainer.loss_type=vespo in no run of b)" for seed in SEEDS
    ]
    lines = "\n".join(report_lines(c))
    assert "Matched on the values the folders share" in lines
    assert "Seeds differ between the folders: trainer.seed = 0, 1, 2 in a; 0, 1 in b." in lines
    final = data.numbers("final").table.frame
    assert set(final["variant"]) == {"grpo", "dapo"}
    assert dict(zip(final["panel"] + "/" + final["variant"], final["runs"], strict=True)) == {
        "tiny/grpo": 3,
        "tiny/dapo": 3,
        "tiny-chat/grpo": 2,
        "tiny-chat/dapo": 2,
    }


def test_a_named_key_must_tell_the_folders_apart(two, tmp_path):
    a, b = two
    with pytest.raises(ReportError, match=r"--across task: .*does not tell them apart.*told apart by: model"):
        across.compare([a, b], across=["task"])
    with pytest.raises(ReportError, match=r"--across modle: no setting of these runs is called that"):
        across.compare([a, b], across=["modle"])
    c = tmp_path / "c"
    fake_grid(c, "tiny-chat", losses=("dapo", "vespo"))
    with pytest.raises(ReportError, match=r"--across trainer.loss_type: .*both have trainer.loss_type=dapo"):
        across.compare([a, c], across=["loss_type"], allow_different=["model"])


def test_folders_with_the_same_settings_are_pooled_or_compared_as_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    fake_grid(a, "tiny")
    fake_grid(b, "tiny", seeds=(3, 4))
    c, data = computed([a, b])
    assert c.title == "a + b (pooled)" and "their runs are pooled" in "\n".join(report_lines(c))
    final = data.numbers("final").table.frame
    assert list(final["runs"]) == [5, 5] and data.facets.col is None
    c, data = computed([a, b], across=[FOLDER])
    final = data.numbers("final").table.frame
    assert sorted(zip(final["panel"], final["runs"], strict=True)) == [
        ("folder=a", 3),
        ("folder=a", 3),
        ("folder=b", 2),
        ("folder=b", 2),
    ]
    assert data.runs.loc["b/grpo-s3", FOLDER] == "b"


def test_the_report_folder_is_explicit_and_never_inside_a_compared_one(two, tmp_path):
    a, b = two
    with pytest.raises(ReportError, match="say where it goes with --out DIR"):
        make_report([a, b], across="model")
    with pytest.raises(ReportError, match="inside the results folder"):
        make_report([a, b], across="model", out=a / "cmp")
    with pytest.raises(ReportError, match="holds the results folder"):
        make_report([a, b], across="model", out=tmp_path)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "paper.md").write_text("mine")
    with pytest.raises(ReportError, match=r"holds other files \(paper.md\)"):
        make_report([a, b], across="model", out=other)
    assert (other / "paper.md").read_text() == "mine"
    with pytest.raises(ReportError, match="compare several results folders"):
        make_report(a, across="model")
    with pytest.raises(ReportError, match="given twice"):
        make_report([a, a], out=tmp_path / "x")
    for grid in (a, b):
        assert not (grid / layout.REPORT_DIR).exists() and not (grid / layout.GRID_CACHE_DIR).exists()


def test_a_finding_on_two_tasks_keeps_each_runs_start_eval_under_its_run_id(tmp_path):
    a, b = tmp_path / "sums", tmp_path / "count"
    fake_grid(a, "tiny", task="chain_sum")
    fake_grid(b, "tiny", task="countdown")
    for grid, start in ((a, 0.3), (b, 0.05)):
        for rid in _ids():
            (layout.run_dir(grid, rid) / layout.START_EVAL_FILE).write_text(
                json.dumps({layout.EVAL_ACCURACY: start})
            )
    c = across.compare([a, b], across=["task"])
    assert c.facets == ("task.name",)
    settings = across.place(ReportSettings.merged(None), c)
    assert settings.col == ("task.name",)
    inputs = load_inputs(c, settings)
    assert inputs.start_evals == {
        **{f"sums/{r}": 0.3 for r in _ids()},
        **{f"count/{r}": 0.05 for r in _ids()},
    }
    tasks = inputs.frame.groupby(FOLDER, observed=True)["task.name"].agg(lambda v: set(v.astype(str)))
    assert tasks.to_dict() == {"sums": {"chain_sum"}, "count": {"countdown"}}


@pytest.mark.slow
def test_the_smoke_grid_on_tiny_and_on_tiny_chat_through_the_cli(tmp_path, model_cache):
    """The smoke grid (two loss types, one seed, 4 steps) run on the embedded tiny model and on
    tiny-chat into two results folders, and one report across them by model."""
    common = [
        "-ogrid.seed=[0]",
        "-ogrid.loss_type=[grpo, vespo]",
        "-otrainer.max_steps=4",
        "-otask.train_size=256",
    ]
    folders = []
    for model, section in (("tiny", "tiny"), ("tiny-chat", "tiny_chat")):
        fast = [f"-o{section}.{k}={v}" for k, v in FAST_TINY.items()]
        results = tmp_path / model
        cli(
            "run",
            "ablations/smoke.yaml",
            "--results",
            str(results),
            f"-omodel={model}",
            *fast,
            *common,
            "--no-report",
        )
        folders.append(str(results / "smoke"))
    refused = cli("report", *folders, "--out", str(tmp_path / "cmp"), check=False)
    assert refused.returncode == 2
    assert "model = tiny in tiny/smoke; tiny-chat in tiny-chat/smoke" in refused.stderr
    assert refused.stderr.rstrip().endswith("for instance: --across model")
    assert not (tmp_path / "cmp").exists()
    done = cli("report", *folders, "--across", "model", "--out", str(tmp_path / "cmp"))
    assert "report written to" in done.stdout
    index = (tmp_path / "cmp" / "index.md").read_text()
    assert "compared by model (panels)" in index
    final = pd.read_csv(tmp_path / "cmp" / "final_performance.csv")
    assert sorted(zip(final["variant"], final["panel"], strict=True)) == [
        ("grpo", "tiny"),
        ("grpo", "tiny-chat"),
        ("vespo", "tiny"),
        ("vespo", "tiny-chat"),
    ]
