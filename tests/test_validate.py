"""Whole-grid validation: each rule with its message; a bad grid writes nothing."""

from pathlib import Path

import pytest
import yaml
from helpers import cli

from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.settings.schema import SpecError

BASE = {
    "name": "bad",
    "task": {"name": "chain_sum", "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
    "harness": {"device": "cpu"},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4, "loss_type": "grpo"},
}


def report_for(tmp_path: Path, trainer=None, **top):
    data = {**BASE, **top, "trainer": {**BASE["trainer"], **(trainer or {})}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    return validate_plan(expand(load_grid(path)))


def problems_text(tmp_path: Path, trainer=None, **top) -> str:
    """What a user is told: the grid's executor block is refused when the file loads, a run's
    sections and TRL's rules when the plan is validated."""
    try:
        report = report_for(tmp_path, trainer, **top)
    except SpecError as e:
        return str(e)
    assert not report.ok
    return report.format()


CATALOGUE = [
    ({"loss_type": "nope"}, "trainer.loss_type = 'nope' is not a TRL loss type"),
    ({"importance_sampling_level": "tokens"}, "importance_sampling_level = 'tokens'"),
    ({"epsilon": -1.0}, "trainer.epsilon = -1.0 must be >= 0"),
    ({"num_iterations": 0}, "trainer.num_iterations = 0 must be >= 1"),
    (
        {"beta": 0.1, "sync_ref_model": True, "ref_model_mixup_alpha": 5.0},
        "ref_model_mixup_alpha = 5.0 must lie in [0, 1]",
    ),
    ({"sync_ref_model": True}, "sync_ref_model = true with beta = 0"),
    ({"beta": 0.1, "ref_model_sync_steps": 10}, "set without sync_ref_model"),
    ({"vespo_k_pos": 3.0}, "loss_type = 'grpo', which does not read it"),
    ({"loss_type": "cispo", "epsilon_high": 0.28}, "absolute cap"),
    ({"num_generations": 3}, "must be divisible by num_generations"),
    ({"num_generations": 1, "per_device_train_batch_size": 1}, "num_generations"),
    ({"temperature": 0.0}, "trainer.temperature = 0.0 must be > 0"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size = 0 must be >= 1"),
    ({"max_steps": 0}, "trainer.max_steps = 0 must be >= 1"),
    ({"learning_rate": float("inf")}, "trainer.learning_rate = inf must be finite"),
    ({"top_p": 5.0}, "trainer.top_p = 5.0 must lie in (0, 1]"),
]


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        ({"seed": -1}, "seed = -1 must lie in [0, "),
        ({"tiny": {"num_heads": 3}}, "multiple of tiny.num_heads = 3"),
        ({"tiny": {"label_noise": 2.0}}, "tiny.label_noise = 2.0"),
        ({"harness": {"device": "cpu", "eval_max_new_tokens": -3}}, "eval_max_new_tokens = -3"),
        ({"executor": {"mem_gb": -5.0}}, "executor.mem_gb = -5.0 must be a finite number > 0"),
    ],
)
def test_harness_rules(tmp_path, top, expected):
    text = problems_text(tmp_path, **top)
    assert expected in text, text


def test_trl_rejection_is_not_followed_by_false_errors(tmp_path):
    report = report_for(tmp_path, {"num_generations": 3})
    assert [e.message for e in report.errors if "GRPOConfig" not in e.message] == []


@pytest.mark.parametrize(("trainer", "expected"), CATALOGUE, ids=[c[1][:40] for c in CATALOGUE])
def test_rule_catalogue(tmp_path, trainer, expected):
    report = report_for(tmp_path, trainer)
    assert not report.ok
    text = report.format("g.yaml")
    assert expected in text, text


def test_trl_rejection_carries_trls_message(tmp_path):
    report = report_for(tmp_path, {"num_generations": 3})
    (err,) = [e for e in report.errors if "GRPOConfig" in e.message]
    assert "TRL's GRPOConfig rejects" in err.message and "divisible" in err.message


def test_unknown_task_and_bad_task_kwargs(tmp_path):
    report = report_for(tmp_path, task={"name": "chain_summ"})
    assert "chain_sum" in report.format()
    report = report_for(tmp_path, task={"name": "chain_sum", "kwargs": {"max_digitz": 2}})
    assert not report.ok and "max_digitz" in report.format()


def test_missing_local_model(tmp_path):
    report = report_for(tmp_path, model="./no/such/model")
    assert not report.ok and "does not exist" in report.format()


def test_executor_settings(tmp_path):
    with pytest.raises(SpecError) as e:
        report_for(tmp_path, executor={"name": "cloud", "timeout_min": 0})
    assert "executor.name = 'cloud'" in str(e.value) and "executor.timeout_min = 0" in str(e.value)


def test_every_bad_cell_reported_with_its_values(tmp_path):
    report = report_for(tmp_path, grid={"loss_type": ["grpo", "nope", "nada"], "seed": [0, 1]})
    bad = [e for e in report.errors if "not a TRL loss type" in e.message]
    assert len(bad) == 4
    assert {e.where for e in bad} == {
        f"loss_type={lt!r}, seed={s}" for lt in ("nope", "nada") for s in (0, 1)
    }


def test_clip_axis_without_effect_is_a_warning(tmp_path):
    report = report_for(tmp_path, grid={"epsilon": [0.1, 0.2]})
    assert report.ok
    assert any("no effect" in w.message for w in report.warnings)
    # GA=4, spg=2, mu=2: every generation batch is used up within one optimizer step -> still on-policy
    trainer = {
        "gradient_accumulation_steps": 4,
        "steps_per_generation": 2,
        "num_iterations": 2,
        "per_device_train_batch_size": 4,
    }
    report = report_for(tmp_path, trainer, grid={"epsilon": [0.1, 0.2]})
    assert any("no effect" in w.message for w in report.warnings)
    report = report_for(tmp_path, {"num_iterations": 2}, grid={"epsilon": [0.1, 0.2]})
    assert report.ok and not any("no effect" in w.message for w in report.warnings)


def test_gpu_grid_validates_on_cpu_host(tmp_path):
    slurm = {"name": "slurm", "gpus_per_node": 1}
    report = report_for(tmp_path, {"bf16": True}, harness={"device": "cuda"}, executor=slurm)
    assert report.ok, report.format()
    report = report_for(tmp_path, {"bf16": True}, harness={"device": "auto"}, executor=slurm)
    assert report.ok, report.format()
    import torch

    if not torch.cuda.is_available():  # running a CUDA run here, locally, cannot work
        report = report_for(tmp_path, harness={"device": "cuda"})
        assert "no CUDA device" in report.format()
    # the same settings for a CPU run keep bf16 (TRL accepts it with use_cpu) but the harness defaults it off
    report = report_for(tmp_path, harness={"device": "cpu"})
    assert report.ok


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.learning_rat=0.1", "learning_rate"),
        ("loss_type=nope", "not a TRL loss type"),
        ("trainer.num_generations=3", "divisible"),
        ("task.name=no_such_task", "no_such_task"),
    ],
)
def test_cli_bad_input_writes_nothing(tmp_path, override, expected):
    results = tmp_path / "results"
    proc = cli("run", "ablations/smoke.yaml", "--results", str(results), "-o", override, check=False)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not results.exists()


def test_missing_task_name_is_named_with_the_fix(tmp_path):
    report = report_for(tmp_path, task={"kwargs": {"min_terms": 2}})
    assert not report.ok
    assert "task.name is not set" in report.format() and "TaskSpec.__init__" not in report.format()


@pytest.mark.parametrize(
    ("trainer", "top", "expected"),
    [
        ({"loss_type": "vespo", "vespo_lambda_pos": float("nan")}, {}, "trainer.vespo_lambda_pos = nan"),
        ({"reward_weights": [1.0, 2.0, 3.0]}, {}, "one weight per reward"),
        ({"scale_rewards": "bogus"}, {}, "trainer.scale_rewards = 'bogus'"),
        ({"top_k": -5}, {}, "trainer.top_k = -5 must be >= 0"),
        ({"repetition_penalty": -1.0}, {}, "trainer.repetition_penalty = -1.0 must be > 0"),
        ({"eval_strategy": "steps"}, {}, "eval_strategy = 'steps'"),
        ({"report_to": ["wandb"]}, {}, "wandb is not installed here"),
        ({"use_liger_kernel": True}, {}, "liger-kernel is not installed here"),
        ({"lr_scheduler_type": "cosine_with_min_lr"}, {}, "needs trainer.lr_scheduler_kwargs with min_lr"),
        ({}, {"seed": 1_000_000_000}, "seed = 1000000000 must lie in [0, "),
        ({}, {"task": {**BASE["task"], "template": "chat"}}, "no chat template"),
    ],
)
def test_settings_that_would_fail_once_training_starts(tmp_path, trainer, top, expected):
    import importlib.util

    if "not installed" in expected and importlib.util.find_spec(expected.split()[0].replace("-", "_")):
        pytest.skip(f"{expected.split()[0]} is installed here")
    report = report_for(tmp_path, trainer, **top)
    assert not report.ok
    assert expected in report.format(), report.format()


def test_results_path_that_is_a_file_is_an_error_not_a_traceback(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("keep me")
    for cmd in ("run", "submit"):
        proc = cli(
            cmd,
            "ablations/smoke.yaml",
            "--results",
            str(blocker),
            "--dry-run" if cmd == "submit" else "--no-report",
            check=False,
        )
        assert (
            proc.returncode == 2
            and "is a file, not a folder" in proc.stderr
            and "Traceback" not in proc.stderr
        )
    assert blocker.read_text() == "keep me"


def test_scale_rewards_takes_the_booleans_trl_maps(tmp_path):
    assert report_for(tmp_path, {"scale_rewards": True}).ok
    assert report_for(tmp_path, {"scale_rewards": False}).ok
    ok = {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1}}
    assert report_for(tmp_path, ok).ok


def test_trls_batch_checks_run_with_the_runs_process_count(tmp_path):
    """generation_batch_size 12 with 4 per device: fine for 1 or 3 processes, refused for 2 (TRL
    raises only once 2 processes start; validation says so before anything is submitted)."""
    trainer = {"per_device_train_batch_size": 4, "num_generations": 4, "generation_batch_size": 12}
    for tasks, ok in ((1, True), (2, False), (3, True)):
        report = report_for(tmp_path, trainer, executor={"tasks_per_node": tasks})
        assert report.ok is ok, report.format()
    (err,) = report_for(tmp_path, trainer, executor={"tasks_per_node": 2}).errors
    assert "(on cpu, 2 processes (executor.nodes 1 x tasks_per_node 2))" in err.message
    assert "generation_batch_size (12) must be divisible by the global batch size (8)" in err.message
    assert "per_device_train_batch_size x 2" in err.message
    sub = {"two": {"set": {"executor.tasks_per_node": 2, "seed": 1}}, "one": {"set": {"seed": 0}}}
    report = report_for(tmp_path, trainer, subgrids=sub)  # a run's own executor settings count
    assert [e.where for e in report.errors] == ["seed=1"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "executor", "processes"),
    [
        ("run", "executor.tasks_per_node=2", "executor.nodes 1 x tasks_per_node 2"),
        ("submit", "executor.nodes=2", "executor.nodes 2 x tasks_per_node 1"),
    ],
)
def test_a_batch_that_does_not_divide_over_the_processes_writes_nothing(
    tmp_path, command, executor, processes
):
    """The world-size check through the CLI, for tasks_per_node (run) and for nodes (submit to
    SLURM): refused before a results folder exists or anything reaches sbatch."""
    results = tmp_path / "results"
    args = ["-o", "trainer.per_device_train_batch_size=4", "-o", "trainer.num_generations=4"]
    args += ["-o", "trainer.generation_batch_size=12", "-o", executor, "-o", "trainer.max_steps=2"]
    if command == "submit":
        args += ["-o", "executor.name=slurm"]
    proc = cli(command, "ablations/smoke.yaml", "--results", str(results), *args, check=False)
    assert proc.returncode != 0
    assert f"2 processes ({processes})" in proc.stderr, proc.stderr
    assert "generation_batch_size (12) must be divisible by the global batch size (8)" in proc.stderr
    assert not results.exists()


@pytest.fixture
def absent(monkeypatch):
    """``absent("peft", ...)``: this process finds none of those packages (``importlib.util.find_spec``
    answers None for them, as where they are not installed; nothing is uninstalled)."""
    import importlib.util

    from harness.config import scale

    real, missing = importlib.util.find_spec, set()

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] in missing else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    scale.top_level_keys.cache_clear()  # memoised: what deepspeed says, or the fallback
    yield lambda *names: missing.update(names)
    scale.top_level_keys.cache_clear()


def test_a_deepspeed_config_is_checked_where_deepspeed_is_absent(tmp_path, absent):
    """Without deepspeed installed: a local run is told to install it; a SLURM run is validated by
    TRL without it (the job environment has it) but its config file must exist."""
    absent("deepspeed")
    config = tmp_path / "ds.json"
    config.write_text('{"zero_optimization": {"stage": 2}}')
    local = report_for(tmp_path, {"deepspeed": str(config)})
    assert [e.message for e in local.errors] == [
        "trainer.deepspeed is set but deepspeed is not installed here; pip install 'grpo-harness[deepspeed]' "
        "(or pip install deepspeed), or drop the setting."
    ]
    assert report_for(tmp_path, {"deepspeed": str(config)}, executor={"name": "slurm"}).ok
    missing = report_for(tmp_path, {"deepspeed": str(tmp_path / "no.json")}, executor={"name": "slurm"})
    (err,) = missing.errors
    assert "no.json': no such file" in err.message
    batch = {"deepspeed": str(config), "num_generations": 3}  # TRL's other checks still run
    assert "divisible by num_generations" in report_for(tmp_path, batch, executor={"name": "slurm"}).format()


def test_a_missing_deepspeed_is_one_problem_for_every_config_of_the_grid(tmp_path, absent):
    absent("deepspeed")
    configs = [{"zero_optimization": {"stage": s}} for s in (1, 2)]
    report = report_for(tmp_path, grid={"trainer.deepspeed": configs, "seed": [0, 1]})
    lines = report.format().splitlines()
    assert lines[0].endswith("1 error; nothing was run or written:"), lines
    assert lines[1].startswith("  - 4 runs [") and lines[1].endswith(
        "trainer.deepspeed is set but deepspeed is not installed here; pip install 'grpo-harness[deepspeed]' "
        "(or pip install deepspeed), or drop the setting."
    )


@pytest.mark.parametrize("executor", ["local", "slurm"])
def test_a_misspelt_deepspeed_key_is_refused_without_deepspeed_too(tmp_path, absent, executor):
    """A login node without deepspeed plans SLURM jobs: DeepSpeed's top-level keys come from the
    fallback list, and a key DeepSpeed would ignore is refused all the same."""
    absent("deepspeed")
    from harness.config import scale

    assert scale.top_level_keys() == scale.FALLBACK_TOP_LEVEL_KEYS
    config = {"train_micro_batch_size_per_gpus": "auto", "zero_optimization": {"stage": 2}}
    errors = [
        e.message for e in report_for(tmp_path, {"deepspeed": config}, executor={"name": executor}).errors
    ]
    assert errors[0] == (
        "trainer.deepspeed: unknown key 'train_micro_batch_size_per_gpus' = 'auto': DeepSpeed ignores a top-level "
        "key it does not know, so this setting would not apply; did you mean 'train_micro_batch_size_per_gpu'? "
        "Rename it."
    )
    assert len(errors) == (1 if executor == "slurm" else 2)  # locally: and deepspeed is not installed


PEFT_GRID = {
    "peft": {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
    "grid": {"peft.r": [4, 16], "seed": [0, 1]},
    "subgrids": {"wide": {"set": {"peft.lora_alpha": 32}}, "plain": {"set": {}}},
}


def test_a_peft_section_without_peft_is_one_problem(tmp_path, absent, capsys):
    absent("peft")
    with pytest.raises(SpecError) as e:
        report_for(tmp_path, **PEFT_GRID)
    (problem,) = [p for p in e.value.problems if "peft" in p]
    assert problem == (
        "peft: the peft: section (LoRA) needs the peft package, which is not installed here, and the grid sets "
        "peft.lora_alpha, peft.lora_dropout, peft.r, peft.target_modules (in peft, grid.peft.r, subgrids.wide.set); "
        "pip install 'grpo-harness[peft]' (or pip install peft), or drop the peft settings to train every weight."
    )
    from harness import cli as harness_cli

    path = tmp_path / "g.yaml"  # report_for wrote it
    assert harness_cli.main(["plan", str(path), "-o", "peft.use_rslora=true"]) == 2
    err = capsys.readouterr().err
    assert err.count("needs the peft package") == 1 and "-o peft.use_rslora" in err, err


def test_each_missing_tracker_is_one_problem_with_its_install_command(tmp_path, absent):
    absent("wandb", "mlflow")
    report = report_for(tmp_path, {"report_to": ["wandb", "mlflow", "wandb"]}, grid={"seed": [0, 1, 2]})
    errors = [line for line in report.format().splitlines() if line.startswith("  - ")]
    assert len(errors) == 2, errors
    assert errors[0].endswith(
        "trainer.report_to names 'wandb' but wandb is not installed here; pip install 'grpo-harness[trackers]' "
        "(or pip install wandb), or drop the setting."
    )
    assert errors[1].endswith(
        "trainer.report_to names 'mlflow' but mlflow is not installed here; pip install mlflow, or drop the setting."
    )
    assert all(e.startswith("  - 3 runs [") for e in errors)


def test_gpus_beyond_one_per_process_are_a_warning(tmp_path):
    slurm = {"name": "slurm", "gpus_per_node": 4}
    report = report_for(tmp_path, executor={**slurm, "tasks_per_node": 1})
    assert report.ok
    (w,) = [w.message for w in report.warnings if "gpus_per_node" in w.message]
    assert "DataParallel" in w and "Set tasks_per_node = gpus_per_node" in w
    two = report_for(tmp_path, executor={**slurm, "tasks_per_node": 2}).warnings
    assert any("2 processes per node use one each" in w.message for w in two)
    matched = report_for(tmp_path, executor={**slurm, "tasks_per_node": 4}).warnings
    assert not [w for w in matched if "gpus_per_node" in w.message]


@pytest.mark.parametrize(
    ("executor", "expected"),
    [
        ({"name": "local", "nodes": 2}, "only SLURM runs a job on several machines"),
        ({"name": "debug", "tasks_per_node": 2}, "the debug executor trains in this one process"),
        ({"name": "slurm", "tasks_per_node": 4, "gpus_per_node": 2}, "local ranks 2-3 would have no GPU"),
    ],
)
def test_process_counts_an_executor_cannot_give_are_refused(tmp_path, executor, expected):
    text = problems_text(tmp_path, executor=executor)
    assert expected in text, text


def test_the_embedded_models_context_is_checked_before_anything_runs(tmp_path):
    """A warm start that cannot fit the context is an error (the build would fail in every run);
    prompts + max_completion_length past it is a warning. The boundary is the build's own check."""
    from harness.config.grid import expand as expand_grid
    from harness.models.tiny import sft_lengths

    tiny = {"sft_examples": 512}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({**BASE, "tiny": tiny}))
    (run,) = expand_grid(load_grid(path)).runs
    _, longest, prompt = sft_lengths(run.tiny, run.task)
    assert 0 < prompt < longest
    at = report_for(tmp_path, tiny={**tiny, "max_position_embeddings": longest})
    assert at.ok
    text = problems_text(tmp_path, tiny={**tiny, "max_position_embeddings": longest - 1})
    assert (
        f"tiny.max_position_embeddings = {longest - 1}, but the warm start's sequences for this task reach {longest} tokens"
        in text
    )
    assert "would fail at the start of every run" in text
    warned = report_for(tmp_path, {"max_completion_length": 64 - prompt + 1}, tiny=tiny)
    assert warned.ok
    (w,) = [w.message for w in warned.warnings if "max_position_embeddings" in w.message]
    assert "reach position 65, past tiny.max_position_embeddings = 64" in w
    assert f"Generate at most {64 - prompt} tokens" in w
    fits = report_for(tmp_path, {"max_completion_length": 64 - prompt}, tiny=tiny)
    assert not any("max_position_embeddings" in w.message for w in fits.warnings)


def test_the_tiny_chat_context_is_checked_too(tmp_path):
    text = problems_text(
        tmp_path, model="tiny-chat", tiny_chat={"sft_examples": 256, "max_position_embeddings": 32}
    )
    assert "tiny_chat.max_position_embeddings = 32, but the warm start's sequences" in text


@pytest.mark.slow
def test_the_context_counts_the_runs_own_prompts_and_the_eval_budget(tmp_path):
    """leg_counting's training prompts run longer than the warm start's (SFT draws other items), and
    the greedy eval generates harness.eval_max_new_tokens; tiny-chat's bare prompts are short."""
    from harness.config.grid import expand as expand_grid
    from harness.models.tiny import sft_lengths

    task = {"name": "leg_counting", "kwargs": {}}
    tiny = {"sft_examples": 64}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({**BASE, "task": task, "tiny": tiny}))
    (run,) = expand_grid(load_grid(path)).runs
    sft_prompt, longest, prompt = sft_lengths(run.tiny, run.task)
    assert prompt > sft_prompt
    context = prompt + 10
    fits = report_for(
        tmp_path, {"max_completion_length": 10}, task=task, tiny={**tiny, "max_position_embeddings": context}
    )
    assert not any("max_position_embeddings" in w.message for w in fits.warnings)
    over = report_for(
        tmp_path, {"max_completion_length": 11}, task=task, tiny={**tiny, "max_position_embeddings": context}
    )
    assert any(f"after prompts of up to {prompt} tokens" in w.message for w in over.warnings)
    evals = report_for(
        tmp_path,
        {"max_completion_length": 10},
        task=task,
        tiny={**tiny, "max_position_embeddings": context},
        harness={"device": "cpu", "eval_max_new_tokens": 200},
    )
    (w,) = {w.message for w in evals.warnings if "max_position_embeddings" in w.message}
    assert w.startswith("harness.eval_max_new_tokens = 200 after prompts")
    chat = report_for(tmp_path, {"max_completion_length": 100}, model="tiny-chat",
                      task={"name": "chain_sum", "kwargs": BASE["task"]["kwargs"], "template": "bare"},
                      tiny_chat={"sft_examples": 256})  # fmt: skip
    assert not any("max_position_embeddings" in w.message for w in chat.warnings)  # 5 + 100 < 128


@pytest.mark.parametrize(
    "trainer, top, level, said",
    [
        ({"max_steps": 20}, {"harness": {"device": "cpu", "checkpoint_steps": 50}}, "warning",
         "harness.checkpoint_steps = 50 > trainer.max_steps = 20: no periodic checkpoint"),
        ({"max_steps": 20, "beta": 0.1, "sync_ref_model": True, "ref_model_sync_steps": 20}, {}, "warning",
         "ref_model_sync_steps = 20 >= trainer.max_steps = 20: the reference is never synced"),
        ({"max_steps": 20, "beta": 0.1, "sync_ref_model": True, "ref_model_sync_steps": 5,
          "ref_model_mixup_alpha": 0.0}, {}, "warning", "ref_model_mixup_alpha = 0 with sync_ref_model"),
        ({}, {"harness": {"device": "cuda"}, "executor": {"name": "slurm", "gpus_per_node": 0}}, "error",
         "harness.device = 'cuda' with executor.gpus_per_node = 0"),
    ],
)  # fmt: skip
def test_settings_that_cannot_act_are_said(tmp_path, trainer, top, level, said):
    report = report_for(tmp_path, trainer, **top)
    found = [f for f in report.findings if said in f.message]
    assert found and found[0].level == level, report.format()


def test_settings_that_act_say_nothing(tmp_path):
    report = report_for(
        tmp_path,
        {
            "max_steps": 20,
            "beta": 0.1,
            "sync_ref_model": True,
            "ref_model_sync_steps": 5,
            "max_completion_length": 6,
        },
        harness={"device": "cpu", "checkpoint_steps": 10},
    )
    assert report.ok and not report.warnings, report.format()


def test_a_report_on_accuracy_without_evaluation_is_said(tmp_path):
    report = report_for(
        tmp_path, harness={"device": "cpu", "eval_steps": 0}, report={"metrics": ["eval/accuracy"]}
    )
    (warning,) = [f for f in report.warnings if "no run evaluates" in f.message]
    assert warning.message.startswith("report.metrics name eval/accuracy")
    quiet = report_for(
        tmp_path, harness={"device": "cpu", "eval_steps": 5}, report={"metrics": ["eval/accuracy"]}
    )
    assert not [f for f in quiet.warnings if "no run evaluates" in f.message]


def test_an_embedded_model_section_no_run_reads_is_said(tmp_path):
    report = report_for(tmp_path, model="tiny", tiny_chat={"hidden_size": -5})
    (warning,) = [f for f in report.warnings if "no run's model reads it" in f.message]
    assert warning.message.startswith("tiny_chat: is set") and "set model: tiny-chat" in warning.message
    assert not [
        f
        for f in report_for(tmp_path, model="tiny", tiny={"sft_steps": 5}).warnings
        if "reads it" in f.message
    ]


def _model_folder(root: Path, **files: str) -> Path:
    folder = root / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt2", "n_positions": 64}')
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)
    return folder


def test_a_chat_template_on_a_folder_without_one_is_refused(tmp_path):
    from harness.models.names import has_chat_template

    bare = _model_folder(tmp_path, tokenizer_config__json='{"model_max_length": 64}')
    task = {**BASE["task"], "template": "chat"}
    report = report_for(tmp_path, model=str(bare), task=task)
    (error,) = [f for f in report.errors if "has no chat template" in f.message]
    assert "every run would fail at its first prompt" in error.message
    auto = report_for(tmp_path, model=str(bare), task={**task, "template": "auto"})
    assert not [f for f in auto.errors if "chat template" in f.message]
    assert not has_chat_template(bare)
    (bare / "chat_template.jinja").write_text("{{ messages }}")
    assert has_chat_template(bare)
    assert not [
        f for f in report_for(tmp_path, model=str(bare), task=task).errors if "chat template" in f.message
    ]


def test_has_chat_template_reads_the_tokenizer_config(tmp_path):
    from harness.models.names import has_chat_template

    folder = _model_folder(tmp_path, tokenizer_config__json='{"chat_template": "{{ messages }}"}')
    assert has_chat_template(folder)


def test_a_report_scored_on_accuracy_without_evaluation_is_refused(tmp_path):
    report = report_for(
        tmp_path, harness={"device": "cpu", "eval_steps": 0}, report={"metric": "eval/accuracy"}
    )
    (error,) = [f for f in report.errors if "no run evaluates" in f.message]
    assert error.message.startswith("report.metric = eval/accuracy") and "every table" in error.message


@pytest.mark.parametrize(
    ("baseline", "refused"),
    [
        ("loss_type=grpo", False),
        ("loss_type=grpo_x", True),
        ("loss_type=dapo, epsilon=0.2", False),  # epsilon unset: TRL's default 0.2
        ("loss_type=dapo, epsilon=0.3", True),
        ("max_digits=1", False),  # a grid key by its last part
        ("loss_type=dapo, epsilon_high=0.28", False),
        ("loss_type=grpo, epsilon_high=None", False),  # varied, left unset: the report labels it (none)
        ("loss_type=grpo, epsilon_high=0.2", True),  # not TRL's default where the grid varies the key
        ("grpo", False),  # a variant label: left to the report
    ],
)
def test_a_report_baseline_no_cell_has_is_refused(tmp_path, baseline, refused):
    grid = {"loss_type": ["grpo", "dapo"], "task.kwargs.max_digits": [1, 2]}
    subgrids = {"plain": {"grid": grid}, "high": {"set": {"loss_type": "dapo", "epsilon_high": 0.28}}}
    report = report_for(tmp_path, subgrids=subgrids, report={"hue": "loss_type", "baseline": baseline})
    errors = [f for f in report.errors if f.message.startswith("report.baseline")]
    assert bool(errors) == refused, report.format()
    if refused:
        assert (
            "no cell of this grid has it" in errors[0].message
            and "loss_type is dapo, grpo" in errors[0].message
        )
