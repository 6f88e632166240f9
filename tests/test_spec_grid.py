"""Grid files: keys, types, overrides, include, the grid language, run ids."""

from pathlib import Path

import pytest
import yaml

from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.settings.schema import SpecError, run_id_of

BASE = {
    "name": "g",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4},
}


def write(tmp_path: Path, data: dict, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def problems(path, *overrides) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_grid(path, list(overrides))
    assert str(path) in str(e.value)
    return e.value.problems


def test_misspelt_trainer_key_names_key_and_suggests(tmp_path):
    p = write(tmp_path, {**BASE, "trainer": {**BASE["trainer"], "learning_rat": 1e-3}})
    (msg,) = problems(p)
    assert "trainer.learning_rat" in msg and "'learning_rate'" in msg


def test_unknown_top_level_key_lists_valid(tmp_path):
    (msg,) = problems(write(tmp_path, {**BASE, "trainr": {}}))
    assert "'trainr'" in msg and "'trainer'" in msg and "Valid:" in msg


def test_all_problems_listed_at_once(tmp_path):
    data = {**BASE, "tiny": {"sft_stepz": 3}, "harness": {"eval_step": 1}, "grid": {"seed": 3}}
    msgs = problems(write(tmp_path, data))
    assert len(msgs) == 3
    assert any("tiny.sft_stepz" in m for m in msgs)
    assert any("harness.eval_step" in m and "eval_steps" in m for m in msgs)
    assert any("grid.seed" in m and "non-empty list" in m for m in msgs)


def test_wrong_type(tmp_path):
    (msg,) = problems(write(tmp_path, {**BASE, "trainer": {"num_iterations": "two"}}))
    assert "trainer.num_iterations = 'two'" in msg and "int" in msg


def test_override_type_checked_and_unknown(tmp_path):
    p = write(tmp_path, BASE)
    (msg,) = problems(p, "trainer.max_steps=lots")
    assert "trainer.max_steps = 'lots'" in msg
    (msg,) = problems(p, "trainer.max_stepz=3")
    assert "max_steps" in msg
    (msg,) = problems(p, "max_steps")
    assert "key=value" in msg


def test_override_applies_and_bare_field_name(tmp_path):
    g = load_grid(write(tmp_path, BASE), ["trainer.max_steps=50", "loss_type=vespo", "model=/some/path"])
    assert g.base["trainer"]["max_steps"] == 50
    assert g.base["trainer"]["loss_type"] == "vespo"
    assert g.base["model"] == "/some/path"


def test_override_of_axis_replaces_it(tmp_path):
    p = write(tmp_path, {**BASE, "grid": {"seed": [0, 1, 2], "loss_type": ["grpo", "dapo"]}})
    assert len(expand(load_grid(p)).runs) == 6
    plan = expand(load_grid(p, ["seed=7"]))
    assert len(plan.runs) == 2 and {r.settings["seed"] for r in plan.runs} == {7}
    plan = expand(load_grid(p, ["grid.seed=[4, 5]"]))
    assert len(plan.runs) == 4 and {r.settings["seed"] for r in plan.runs} == {4, 5}


def test_include_merges_base(tmp_path):
    write(tmp_path, BASE, "base.yaml")
    p = write(tmp_path, {"include": "base.yaml", "name": "child", "trainer": {"max_steps": 9}})
    g = load_grid(p)
    assert g.name == "child"
    assert g.base["trainer"] == {**BASE["trainer"], "max_steps": 9}
    assert g.base["task"]["name"] == "chain_sum"


def test_include_cycle(tmp_path):
    write(tmp_path, {"include": "b.yaml"}, "a.yaml")
    write(tmp_path, {"include": "a.yaml"}, "b.yaml")
    (msg,) = problems(tmp_path / "a.yaml")
    assert "include cycle" in msg


def test_product_zip_subgrids(tmp_path):
    data = {
        **BASE,
        "grid": {"seed": [0, 1]},
        "zip": [{"loss_type": ["grpo", "dapo"], "epsilon_high": [0.2, 0.28]}],
        "subgrids": {
            "clipped": {},
            "vespo": {"set": {"loss_type": "vespo"}, "grid": {"vespo_k_pos": [1.0, 2.0]}},
        },
    }
    plan = expand(load_grid(write(tmp_path, data)))
    # clipped: 2 seeds x 2 zipped pairs; vespo: 2 seeds x 2 epsilon_high x 2 k (its set wins on loss_type)
    assert len(plan.runs) == 4 + 8 and not plan.duplicates
    clipped = {
        (r.get("trainer.loss_type"), r.get("trainer.epsilon_high"))
        for r in plan.runs
        if r.subgrid == "clipped"
    }
    assert clipped == {("grpo", 0.2), ("dapo", 0.28)}
    vespo = [r for r in plan.runs if r.subgrid == "vespo"]
    assert {r.get("trainer.loss_type") for r in vespo} == {"vespo"}
    assert {r.get("trainer.vespo_k_pos") for r in vespo} == {1.0, 2.0}


def test_subgrid_settings_and_dedup(tmp_path):
    data = {
        **BASE,
        "grid": {"seed": [0, 1]},
        "subgrids": {
            "a": {"set": {"loss_type": "grpo"}},
            "b": {"grid": {"loss_type": ["grpo", "vespo"]}},
        },
    }
    plan = expand(load_grid(write(tmp_path, data)))
    # a gives grpo x 2 seeds; b gives grpo/vespo x 2 seeds; the grpo cells of b duplicate a's.
    assert len(plan.runs) == 4
    assert len(plan.duplicates) == 2
    assert {r.get("trainer.loss_type") for r in plan.runs} == {"grpo", "vespo"}
    assert set(plan.varying_keys) == {"seed", "trainer.loss_type"}


def test_zip_lengths_must_match(tmp_path):
    data = {**BASE, "zip": [{"loss_type": ["grpo", "dapo"], "epsilon_high": [0.2]}]}
    (msg,) = problems(write(tmp_path, data))
    assert "equal lengths" in msg


def test_run_id_stable_and_sensitive(tmp_path):
    p = write(tmp_path, {**BASE, "grid": {"seed": [0, 1]}})
    ids1 = [r.run_id for r in expand(load_grid(p)).runs]
    # key order in the file does not matter
    data = {**BASE, "grid": {"seed": [0, 1]}}
    data["trainer"] = dict(reversed(list(data["trainer"].items())))
    ids2 = [r.run_id for r in expand(load_grid(write(tmp_path, data, "h.yaml"))).runs]
    assert ids1 == ids2 and len(set(ids1)) == 2
    ids3 = [r.run_id for r in expand(load_grid(p, ["trainer.max_steps=4"])).runs]
    assert not set(ids1) & set(ids3)
    # pinned: a change to the hashing would silently orphan every existing result folder
    assert run_id_of({"seed": 0, "trainer": {"loss_type": "grpo"}}) == run_id_of(
        {"trainer": {"loss_type": "grpo"}, "seed": 0}
    )
    assert run_id_of({"a": 1}) == "015abd7f5c"


def test_seed_drives_trainer_seed(tmp_path):
    plan = expand(load_grid(write(tmp_path, {**BASE, "grid": {"seed": [3]}})))
    assert plan.runs[0].settings["trainer"]["seed"] == 3


def test_executor_settings_per_run_group_arrays_not_ids(tmp_path):
    from harness.cluster.slurm import group_by_resources

    data = {
        **BASE,
        "executor": {"name": "slurm", "gpus_per_node": 1},
        "grid": {"seed": [0, 1]},
        "subgrids": {"small": {}, "big": {"set": {"model": "/m/big", "executor.gpus_per_node": 4}}},
    }
    plan = expand(load_grid(write(tmp_path, data)))
    assert len(plan.runs) == 4
    assert all("executor" not in r.settings for r in plan.runs)
    assert "executor.gpus_per_node" not in plan.varying_keys
    groups = group_by_resources(plan.runs, plan.grid.executor)
    assert sorted((g.gpus_per_node, len(runs)) for g, runs in groups) == [(1, 2), (4, 2)]
    # where a run executes is not what it is: the same cell with other resources keeps its id
    small = {r.run_id for r in plan.runs if r.subgrid == "small"}
    data["executor"]["gpus_per_node"] = 2
    plan2 = expand(load_grid(write(tmp_path, data, "h.yaml")))
    assert {r.run_id for r in plan2.runs if r.subgrid == "small"} == small


def test_duplicate_keys_are_refused_with_both_lines(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("name: d\ntrainer:\n  loss_type: grpo\n  beta: 0.1\n  loss_type: dapo\n")
    (msg,) = problems(p)
    assert "duplicate key 'loss_type'" in msg and "line 5" in msg and "first at line 3" in msg
    assert "<unicode string>" not in msg
    (msg,) = problems(write(tmp_path, BASE), "trainer.beta={a: 1, a: 2}")
    assert "duplicate key 'a'" in msg


def test_yaml_type_hints_accept_and_refuse_what_grpo_config_declares():
    from harness.config.keys import section_fields
    from harness.settings.schema import describe_hint, hint_name, type_ok

    fields = section_fields("trainer")
    assert (
        type_ok(0.1, fields["epsilon"])
        and type_ok(1, fields["epsilon"])
        and not type_ok(True, fields["epsilon"])
    )
    assert type_ok(None, fields["epsilon_high"]) and not type_ok("x", fields["epsilon_high"])
    assert type_ok("cosine", fields["lr_scheduler_type"]) and not type_ok(3, fields["lr_scheduler_type"])
    assert type_ok(["wandb"], fields["report_to"]) and not type_ok(3, fields["report_to"])
    assert hint_name(fields["epsilon_high"]) == "float | None"
    assert hint_name(describe_hint(dict[str, int] | None)) == "dict | None"


def test_name_from_an_override_or_profile_is_checked_too(tmp_path):
    p = write(tmp_path, {**BASE, "profiles": {"quick": {"name": "../../x"}}})
    for override in ("name=/tmp/escape", "name=../../escape", "name=[1, 2]"):
        (msg,) = problems(p, override)
        assert "letters, digits" in msg
    with pytest.raises(SpecError, match="letters, digits"):
        load_grid(p, [], profile="quick")


def test_an_unnamed_grid_is_named_after_its_file_not_its_include(tmp_path):
    write(tmp_path, {**BASE, "name": "base", "description": "the base"}, name="base.yaml")
    child = tmp_path / "my_dapo.yaml"
    child.write_text("include: base.yaml\ngrid: {loss_type: [dapo]}\n")
    grid = load_grid(child)
    assert grid.name == "my_dapo" and grid.description == ""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"zip": 5}, "zip must be a list"),
        ({"grid": ["seed", "loss_type"]}, "grid must be a mapping"),
        ({"subgrids": {"a": {"set": ["beta", 0.1]}}}, "subgrids.a.set must be a mapping"),
        ({"subgrids": {"a": {"grid": 5}}}, "subgrids.a.grid must be a mapping"),
        ({"subgrids": {"a": {"zip": 5}}}, "subgrids.a.zip must be a list"),
        (
            {"trainer": {"generation_kwargs": {"top_k": 5, 1: 3}}},
            "trainer.generation_kwargs: key 1 is not a string",
        ),
        ({"profiles": {1: {"seed": 1}}}, "profiles: key 1 is not a string"),
    ],
)
def test_malformed_structure_is_one_clear_problem(tmp_path, extra, expected):
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({**BASE, **extra}))
    msgs = problems(path, "grid.seed=[0]")
    assert any(expected in m for m in msgs), msgs
    (msg,) = problems(write(tmp_path, BASE), "task.kwargs={1: 2}")
    assert "key 1 is not a string" in msg


def test_fields_the_harness_sets_are_refused_with_the_alternative(tmp_path):
    (msg,) = problems(write(tmp_path, {**BASE, "trainer": {**BASE["trainer"], "seed": 5}}))
    assert "trainer.seed is set by the harness" in msg and "top-level seed" in msg
    (msg,) = problems(write(tmp_path, {**BASE, "grid": {"output_dir": ["a", "b"]}}))  # once, not per value
    assert "trainer.output_dir is set by the harness" in msg


def test_one_key_given_twice_is_refused(tmp_path):
    data = {**BASE, "grid": {"loss_type": ["grpo", "dapo"], "trainer.loss_type": ["vespo"]}}
    (msg,) = problems(write(tmp_path, data))
    assert "trainer.loss_type is given 2 times" in msg
    data = {**BASE, "subgrids": {"a": {"set": {"loss_type": "dapo"}, "grid": {"loss_type": ["grpo"]}}}}
    (msg,) = problems(write(tmp_path, data))
    assert msg.startswith("subgrids.a: trainer.loss_type is given 2 times")


def test_an_int_in_a_float_field_is_the_same_run_as_the_float(tmp_path):
    plan = expand(load_grid(write(tmp_path, {**BASE, "grid": {"epsilon": [1, 1.0, 0.5]}})))
    assert len(plan.runs) == 2 and plan.runs[0].settings["trainer"]["epsilon"] == 1.0
    ((dropped, kept),) = plan.duplicates
    assert dropped.varying == {"trainer.epsilon": 1.0} and kept.varying == {"trainer.epsilon": 1}
    via_override = expand(load_grid(write(tmp_path, BASE), ["trainer.epsilon=1"])).runs[0].run_id
    assert via_override == expand(load_grid(write(tmp_path, BASE), ["trainer.epsilon=1.0"])).runs[0].run_id


def test_empty_subgrid_and_whole_section_values_are_refused(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(BASE) + "subgrids:\n  a:\n  b: {set: {loss_type: dapo}}\n")
    (msg,) = problems(path)
    assert "subgrids.a must be a mapping" in msg and "{}" in msg
    (msg,) = problems(write(tmp_path, BASE), "trainer={max_steps: 2}")
    assert "'trainer' as a whole would replace every trainer setting" in msg


def test_top_level_axis_override_of_a_key_every_subgrid_sets_is_refused(tmp_path):
    data = {**BASE, "subgrids": {"a": {"set": {"loss_type": "dapo"}}, "b": {"set": {"loss_type": "grpo"}}}}
    (msg,) = problems(write(tmp_path, data), "grid.loss_type=[vespo]")
    assert "-o grid.loss_type" in msg and "set by every sub-grid" in msg


@pytest.mark.slow
def test_yaml_that_contains_itself_or_nests_too_deep_is_refused(tmp_path):
    head = "name: g\ntask: {name: chain_sum}\n"
    path = tmp_path / "rec.yaml"
    path.write_text(head + "notes: &a [*a]\n")
    (msg,) = problems(path)
    assert "contains itself" in msg
    path.write_text(head + "notes: " + "[" * 3000 + "]" * 3000 + "\n")
    (msg,) = problems(path)
    assert "nested deeper" in msg
    bomb = "".join(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
    path.write_text(head + "notes:\n  a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + bomb)
    (msg,) = problems(path)
    assert "aliases are expanded" in msg
    (msg,) = problems(write(tmp_path, BASE), "notes=&a [*a]")
    assert msg.startswith("-o notes holds a value that contains itself")


def test_yaml_merge_keys_take_a_mapping_and_let_keys_override_it(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        yaml.safe_dump({k: v for k, v in BASE.items() if k != "trainer"})
        + "trainer: {<<: {max_steps: 3, epsilon: 0.3}, epsilon: 0.25}\n"
    )
    (run,) = expand(load_grid(path)).runs
    assert run.trainer["epsilon"] == 0.25 and run.trainer["max_steps"] == 3


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("trainer.learning_rate=1e4", "write 10000.0 or 1.0e+4."),
        ("trainer.learning_rate=2.5E-3", None),  # YAML reads it as a float: no problem
        ("epsilon='0.2'", "is a string (quoted?); write the number bare: 0.2."),
        ("epsilon=inf", "YAML writes infinity .inf and not-a-number .nan (a setting must be finite)."),
        ("task.eval_size=1.0e+3", "is a float; this field takes an integer: write 1000."),
    ],
)
def test_number_hints_name_a_spelling_that_parses(tmp_path, override, hint):
    path = write(tmp_path, BASE)
    if hint is None:
        load_grid(path, [override])
        return
    (msg,) = problems(path, override)
    assert msg.endswith(hint), msg
    suggested = msg.rsplit("write ", 1)[1].rstrip(".").split(" or ") if "write " in msg else []
    for suggestion in suggested:
        if suggestion[:1].isdigit():  # each suggested spelling is accepted as written
            key = override.split("=")[0]
            load_grid(path, [f"{key}={suggestion}"])


def test_an_empty_axis_says_to_give_a_value(tmp_path):
    (msg,) = problems(write(tmp_path, BASE), "grid.seed=[]")
    assert msg.endswith("got []; give it at least one value, or remove the axis.")


def test_epoch_sync_counts_the_processes_of_each_run(tmp_path):
    trainer = {**BASE["trainer"], "beta": 0.1, "sync_ref_model": True, "ref_model_sync_steps": "epoch"}
    data = {**BASE, "trainer": trainer, "task": {**BASE["task"], "train_size": 64}}
    data["subgrids"] = {
        "one": {"set": {"seed": 0}},
        "four": {"set": {"seed": 1, "executor.tasks_per_node": 4}},
    }
    runs = {r.seed: r for r in expand(load_grid(write(tmp_path, data))).runs}
    # 64 prompts x 4 generations / (8 per device x processes)
    assert runs[0].trainer["ref_model_sync_steps"] == 32 and runs[1].trainer["ref_model_sync_steps"] == 8


def test_a_name_too_long_for_a_folder_is_refused(tmp_path):
    (msg,) = problems(write(tmp_path, {**BASE, "name": "x" * 300}))
    assert "is 300 characters" in msg and "at most 128" in msg
    assert load_grid(write(tmp_path, {**BASE, "name": "x" * 128})).name == "x" * 128


def test_an_integer_beyond_a_float_is_infinite_and_refused(tmp_path):
    """``epsilon: 1e400`` written as digits: no OverflowError, the finiteness rule names it."""
    from harness.config.validate import validate_plan

    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(BASE) + "\n")
    plan = expand(load_grid(path, ["trainer.epsilon=" + "9" * 400]))
    (error,) = validate_plan(plan).errors
    assert "trainer.epsilon = inf must be finite" in error.message


@pytest.mark.parametrize(
    "text, said",
    [
        (
            "name: t\nexecutor: {timeout_min: 1:30:00}\n",
            "'1:30:00' is read by YAML 1.1 as the base-60 number 5400",
        ),
        (
            "name: t\ntrainer: {learning_rate: 1:30.5}\n",
            "'1:30.5' is read by YAML 1.1 as the base-60 number 90.5",
        ),
        (
            "name: t\nsubgrids:\n  on: {set: {loss_type: dapo}}\n",
            "the key 'on' is read by YAML 1.1 as the boolean True",
        ),
        ("name: t\nsubgrids:\n  No: {set: {loss_type: dapo}}\n", "quote it ('No':)"),
    ],
)
def test_yaml_1_1_corners_are_named_with_the_right_fix(tmp_path, text, said):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    (msg,) = problems(path)
    assert said in msg, msg


def test_an_override_in_base_60_is_named(tmp_path):
    (msg,) = problems(write(tmp_path, BASE), "executor.timeout_min=1:30:00")
    assert "base-60 number 5400" in msg and "timeout_min: 90" in msg


def test_an_override_of_a_key_some_sub_grids_set_is_refused_naming_them(tmp_path):
    """``-o`` must reach every cell: a key one sub-grid sets itself would keep that sub-grid's
    value while the plan said the override applied. A profile (the grid author's) sets the base."""
    data = {
        **BASE,
        "subgrids": {"a": {"set": {"trainer.learning_rate": 1.0e-3}}, "b": {"set": {"trainer.beta": 0.1}}},
        "profiles": {"slow": {"trainer.learning_rate": 1.0e-5}},
    }
    path = write(tmp_path, data)
    (msg,) = problems(path, "trainer.learning_rate=0.01")
    assert msg.startswith("-o trainer.learning_rate: trainer.learning_rate is set by sub-grid a in this grid")
    runs = expand(load_grid(path, profile="slow")).runs
    assert sorted(r.trainer.get("learning_rate") for r in runs) == [1.0e-5, 1.0e-3]  # b takes the profile's
    plain = expand(load_grid(path, ["trainer.max_steps=5"])).runs  # a key no sub-grid sets reaches all
    assert [r.trainer["max_steps"] for r in plain] == [5, 5]


def test_a_subgrid_on_the_first_seeds_follows_the_grid_seed_axis(tmp_path):
    """``seeds: n`` runs a sub-grid on the first n values of the grid's seed axis, so that a
    ``-o grid.seed=[...]`` (a grid run again on other seeds) moves them too."""
    path = write(
        tmp_path,
        {
            **BASE,
            "grid": {"seed": [0, 1, 2, 3]},
            "subgrids": {
                "dose": {"grid": {"epsilon_high": [0.2, 0.4]}, "seeds": 2},
                "pair": {"grid": {"loss_type": ["grpo", "dapo"]}},
            },
        },
    )
    by_sub = {}
    for run in expand(load_grid(path)).runs:
        by_sub.setdefault(run.subgrid, []).append(run.settings["seed"])
    assert sorted(by_sub["dose"]) == [0, 0, 1, 1] and sorted(by_sub["pair"]) == [0, 0, 1, 1, 2, 2, 3, 3]
    moved = expand(load_grid(path, overrides=["grid.seed=[7, 8, 9]"])).runs
    assert sorted(r.settings["seed"] for r in moved if r.subgrid == "dose") == [7, 7, 8, 8]


@pytest.mark.parametrize(
    ("sub", "words"),
    [
        ({"seeds": 0}, "seeds = 0: write how many of the grid's seeds"),
        ({"seeds": True}, "seeds = True: write how many"),
        ({"seeds": "2"}, "seeds = '2': write how many"),
        ({"seeds": 2, "grid": {"seed": [5, 6]}}, "seeds = 2 and a seed of its own both choose its seeds"),
    ],
)
def test_bad_subgrid_seeds_are_refused_naming_the_fix(tmp_path, sub, words):
    data = {**BASE, "grid": {"seed": [0, 1]}, "subgrids": {"dose": {"set": {"epsilon": 0.2}, **sub}}}
    path = write(tmp_path, data)
    with pytest.raises(SpecError) as e:
        load_grid(path)
    assert "subgrids.dose" in str(e.value) and words in str(e.value)


def test_a_subgrid_on_the_first_seeds_of_a_zipped_seed_axis(tmp_path):
    data = {
        **BASE,
        "zip": [{"seed": [3, 3, 5, 7], "epsilon": [0.1, 0.2, 0.1, 0.2]}],
        "subgrids": {"dose": {"grid": {"epsilon_high": [0.2, 0.4]}, "seeds": 2}},
    }
    seeds = sorted(r.settings["seed"] for r in expand(load_grid(write(tmp_path, data))).runs)
    assert seeds == [3, 3, 3, 3, 5, 5]  # the zip's rows of seeds 3 (two) and 5, each at two values
