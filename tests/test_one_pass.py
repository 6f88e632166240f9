"""Every problem of a grid in one pass: the file's keys and types, the profile, ``-o``, the executor
and the cells are all checked and reported together, grouped by where they come from; a setting
left out for its problem does not bring its default's errors into the cells' listing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.config.spec import load_grid
from harness.settings.schema import SpecError

BASE = {
    "name": "onepass",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "harness": {"device": "cpu", "checkpoint_steps": 2},
    "trainer": {
        "max_steps": 3,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
    },
}


def plan(tmp_path: Path, capsys, data: dict, *args: str) -> tuple[int, str]:
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    results = tmp_path / "results"
    code = main(["plan", str(path), "--results", str(results), *args])
    out = capsys.readouterr()
    assert not results.exists(), "plan wrote results"
    return code, out.err + out.out


def with_trainer(**trainer) -> dict:
    return {**BASE, "trainer": {**BASE["trainer"], **trainer}}


def test_a_string_number_does_not_hide_the_cells_errors(tmp_path, capsys):
    code, text = plan(tmp_path, capsys, with_trainer(learning_rate="1e-5", epsilon=-1.0))
    assert code == 2
    assert "trainer.learning_rate = '1e-5' is read by YAML as a string" in text
    assert "trainer.epsilon = -1.0 must be >= 0" in text
    assert "the cells (checked with the settings above left out, at their defaults):" in text
    assert "2 problems" in text


def test_a_bad_name_does_not_hide_the_profile_and_overrides(tmp_path, capsys):
    data = {**BASE, "name": "bad name!"}
    code, text = plan(tmp_path, capsys, data, "--profile", "paper", "-o", "trainer.max_stepz=3")
    assert code == 2
    assert "name = 'bad name!'" in text
    assert "--profile paper: no such profile" in text
    assert "unknown key 'trainer.max_stepz'" in text
    for group in ("the file's keys and values:", "the profile:", "-o overrides:"):
        assert group in text


def test_an_executor_error_does_not_hide_the_rest(tmp_path, capsys):
    data = {**with_trainer(num_generations=3), "executor": {"mem_gb": -5}}
    code, text = plan(tmp_path, capsys, data)
    assert code == 2
    assert "the executor section:" in text and "executor.mem_gb = -5" in text
    assert "must be divisible by num_generations (3)" in text


def test_a_left_out_setting_brings_no_error_of_its_default(tmp_path, capsys):
    # TRL's max_steps default (-1) is refused by the harness: that is the default's, not the grid's
    code, text = plan(tmp_path, capsys, with_trainer(max_steps="10", epsilon=-1.0))
    assert code == 2
    assert "trainer.max_steps = '10' is read by YAML as a string" in text
    assert "trainer.max_steps = -1" not in text
    assert "trainer.epsilon = -1.0" in text


def test_shape_problems_do_not_hide_the_rest_and_are_said_once(tmp_path, capsys):
    data = {**with_trainer(learning_rate="x"), "grid": ["loss_type", "grpo"], "report": 3}
    code, text = plan(tmp_path, capsys, data)
    assert code == 2
    assert "grid must be a mapping of key: [values], got list" in text
    assert "report must be a mapping" in text
    assert "trainer.learning_rate = 'x'" in text
    assert text.count("grid must be a mapping") == 1


def test_a_non_string_key_is_said_once(tmp_path, capsys):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(with_trainer(learning_rate="x")) + "grid:\n  1: [2]\n")
    with pytest.raises(SpecError) as e:
        load_grid(path)
    text = str(e.value)
    assert "key 1 is not a string" in text and "trainer.learning_rate = 'x'" in text
    assert "unknown key '1'" not in text


def test_one_origin_keeps_the_plain_listing(tmp_path, capsys):
    code, text = plan(tmp_path, capsys, with_trainer(learning_rate="x"))
    assert code == 2
    assert "g.yaml: 1 problem:" in text and "the file's keys and values:" not in text


def test_a_valid_grid_still_plans(tmp_path, capsys):
    code, text = plan(tmp_path, capsys, BASE)
    assert code == 0, text


def test_the_partial_grid_leaves_out_what_failed(tmp_path):
    path = tmp_path / "g.yaml"
    data = {**with_trainer(learning_rate="x"), "grid": {"loss_type": ["grpo", "nope"], "seed": [0, "1"]}}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as e:
        load_grid(path)
    partial = e.value.partial
    assert partial is not None
    assert {a.key: a.values for a in partial.axes} == {"trainer.loss_type": ("grpo",), "seed": (0,)}
    assert "learning_rate" not in partial.base["trainer"]
    assert {"trainer.learning_rate", "trainer.loss_type", "seed"} <= e.value.left_out


def test_an_invisible_character_in_a_key_is_shown_and_named(tmp_path, capsys):
    path = tmp_path / "g.yaml"
    text = yaml.safe_dump(BASE).replace("max_steps:", "max_steps\u200b:")
    path.write_text(text, encoding="utf-8")
    code = main(["plan", str(path), "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2
    assert "'trainer.max_steps\\u200b' holds the invisible character U+200B ZERO WIDTH SPACE" in err
    assert "retype it as 'trainer.max_steps'" in err
    assert "max_steps = -1" not in err  # the default's error, not the grid's


def test_a_typo_brings_no_error_of_the_default_it_left(tmp_path, capsys):
    data = {
        **BASE,
        "trainer": {k if k != "max_steps" else "max_stepz": v for k, v in BASE["trainer"].items()},
    }
    code, text = plan(tmp_path, capsys, data)
    assert code == 2 and "unknown key 'trainer.max_stepz'" in text and "max_steps = -1" not in text


def test_a_folder_is_not_called_missing(tmp_path, capsys):
    (tmp_path / "grids").mkdir()
    (tmp_path / "grids" / "a.yaml").write_text("name: a\n")
    assert main(["plan", str(tmp_path / "grids")]) == 2
    assert "is a folder, not a grid file (it holds a.yaml)" in capsys.readouterr().err
    (tmp_path / "g.yaml").write_text("include: grids\n")
    assert main(["plan", str(tmp_path / "g.yaml")]) == 2
    assert (
        "include: 'grids':" in (err := capsys.readouterr().err) and "is a folder; include a grid file" in err
    )


def test_a_plugin_raising_keyboardinterrupt_at_import_is_reported(tmp_path, capsys, monkeypatch):
    (tmp_path / "kbi_plugin.py").write_text("raise KeyboardInterrupt\n")
    (tmp_path / "broken_plugin.py").write_text("import nothing_of_that_name_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, text = plan(tmp_path, capsys, {**BASE, "plugins": ["kbi_plugin", "broken_plugin"]})
    assert code == 2
    assert "importing 'kbi_plugin' raised KeyboardInterrupt (" in text and "kbi_plugin.py:1" in text
    assert "broken_plugin" in text


def test_yaml_traps_do_not_stop_the_rest(tmp_path, capsys):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(with_trainer(learning_rate="x")) + "grid: {seed: [010, 1]}\n")
    code = main(["plan", str(path), "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2
    assert "'010' is read by YAML 1.1 as the octal number 8; write 10" in err
    assert "trainer.learning_rate = 'x'" in err


def test_an_unselected_profile_with_an_unknown_key_is_refused(tmp_path, capsys):
    code, text = plan(tmp_path, capsys, {**BASE, "profiles": {"quick": {"trainer.max_stepz": 5}}})
    assert code == 2 and "profiles.quick: unknown key 'trainer.max_stepz'" in text


def test_an_invisible_character_in_a_subgrid_name_is_refused(tmp_path, capsys):
    data = {**BASE, "subgrids": {"a\u200b": {"set": {"loss_type": "grpo"}}}}
    code, text = plan(tmp_path, capsys, data)
    assert code == 2 and "'a\\u200b' holds U+200B ZERO WIDTH SPACE" in text


def test_a_typo_of_an_embedded_model_is_refused(tmp_path, capsys):
    code, text = plan(tmp_path, capsys, {**BASE, "model": "tiny-stepz"})
    assert code == 2 and "did you mean 'tiny-steps'" in text


def test_a_cell_refused_for_a_section_still_has_its_other_settings_checked(tmp_path, capsys):
    data = {**with_trainer(max_steps=-5), "tiny": {"num_heads": 3}}
    code, text = plan(tmp_path, capsys, data)
    assert code == 2
    assert "must be a multiple of tiny.num_heads = 3" in text
    assert "trainer.max_steps = -5 must be >= 1" in text
    assert "no run's model reads it" not in text
    assert "2 errors" in text  # the header counts distinct problems


def test_an_executor_type_error_does_not_hide_its_range_errors(tmp_path, capsys):
    data = {**BASE, "executor": {"name": "slurm", "nodes": 0, "cpus_per_task": "1e3"}}
    code, text = plan(tmp_path, capsys, data)
    assert code == 2
    assert (
        "executor.cpus_per_task = '1e3' is read by YAML as a string; this field takes an integer: write 1000"
        in text
    )
    assert "executor.nodes = 0 must be >= 1" in text


def test_report_problems_do_not_hide_a_baseline_no_cell_has(tmp_path, capsys):
    data = {
        **BASE,
        "grid": {"loss_type": ["grpo", "dapo"]},
        "report": {"x": "epoch", "baseline": "loss_type=grpoo"},
    }
    code, text = plan(tmp_path, capsys, data)
    assert (
        code == 2 and "report.x = 'epoch'" in text and "report.baseline = 'loss_type=grpoo': no cell" in text
    )


@pytest.mark.parametrize(
    ("baseline", "said"),
    [
        ("seed=0", "seed cannot name the baseline"),
        ("loss_type=grpo, loss_type=dapo", "loss_type is given twice"),
    ],
)
def test_a_baseline_by_seed_or_with_a_key_twice_is_refused(tmp_path, capsys, baseline, said):
    data = {**BASE, "grid": {"loss_type": ["grpo", "dapo"], "seed": [0, 1]}, "report": {"baseline": baseline}}
    code, text = plan(tmp_path, capsys, data)
    assert code == 2 and said in text


def test_a_report_metric_typo_is_warned(tmp_path, capsys):
    data = {**BASE, "report": {"metric": "rewardd", "curves": ["kll"]}}
    code, text = plan(tmp_path, capsys, data)
    assert code == 0
    assert "warning: report.metric: metric 'rewardd'" in text and "did you mean 'kl'" in text


def test_an_empty_file_is_said_to_be_empty(tmp_path, capsys):
    (tmp_path / "g.yaml").write_text("# nothing yet\n")
    assert main(["plan", str(tmp_path / "g.yaml")]) == 2
    assert "the file is empty" in capsys.readouterr().err
