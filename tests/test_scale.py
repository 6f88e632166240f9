"""Plan-time checks of ``trainer.deepspeed`` and ``trainer.fsdp`` (:mod:`harness.config.scale`): each
config below was run first, on two CPU processes, and failed at start with the error the plan now
gives before anything runs (DeepSpeed 0.19.8, transformers 5.24); the accepted ones trained."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("deepspeed", reason="the deepspeed extra (pip install -e '.[deepspeed]')")

AUTO = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
Z2 = {**AUTO, "zero_optimization": {"stage": 2}}


def _validate(tmp_path, deepspeed=None, extra: str = "", tasks_per_node: int = 2):
    from harness.config.grid import expand
    from harness.config.spec import load_grid
    from harness.config.validate import validate_plan

    body = textwrap.dedent(f"""\
        name: scale
        model: tiny
        task: {{name: chain_sum, kwargs: {{min_terms: 2, max_terms: 2, max_digits: 1}}, train_size: 64}}
        trainer: {{max_steps: 2, per_device_train_batch_size: 8, num_generations: 4, max_completion_length: 6}}
        harness: {{device: cpu}}
        executor: {{name: local, tasks_per_node: {tasks_per_node}}}
        """)
    if deepspeed is not None:
        body += f"grid: {{trainer.deepspeed: [{json.dumps(deepspeed)}]}}\n"
    path = tmp_path / "g.yaml"
    path.write_text(body + extra)
    validation = validate_plan(expand(load_grid(path)))
    return [f.message for f in validation.errors]


@pytest.mark.parametrize(
    "config, said",
    [
        ({**AUTO, "zero_optimization": {"stage": 4}}, "DeepSpeed refuses zero_optimization.stage = 4"),
        (
            {**AUTO, "zero_optimization": {"stage": 2, "bogus": 1}},
            "zero_optimization.bogus = 1: Extra inputs",
        ),
        (
            {**AUTO, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "bogus": 1}}},
            "offload_optimizer.bogus = 1",
        ),
        ({"zero_optimization": {"stage": 2}}, "Add train_micro_batch_size_per_gpu: auto"),
        (
            {**Z2, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}},
            "optimizer.params.lr=0.001 vs hf learning_rate",
        ),
        ({**Z2, "bf16": {"enabled": True}}, "bf16.enabled=True vs hf bf16"),
        # 8 per process x 2 processes: the batch DeepSpeed is told must count both
        ({**Z2, "train_batch_size": 8}, "train_batch_size=8 vs hf train_batch_size (calculated)=16"),
        ({**Z2, "optimizer": {"type": "FusedLamb"}}, "'FusedLamb' is not an optimizer DeepSpeed builds"),
        (
            {**AUTO, "zero_optimization": {"stage": 2}, "optimizer": {"type": "SGD"}},
            "zero_allow_untested_optimizer",
        ),
        ({**Z2, "optimizer": {"type": "Lion"}}, "FusedLionBuilder kernel, which its CPU build lacks"),
        ({**Z2, "optimizer": {"type": "Lamb"}}, "FusedLambBuilder kernel, which its CPU build lacks"),
    ],
)
def test_a_deepspeed_config_refused_at_start_is_refused_at_plan(tmp_path, config, said):
    errors = _validate(tmp_path, config)
    assert len(errors) == 1 and said in errors[0], errors
    assert errors[0].startswith("trainer.deepspeed")


@pytest.mark.parametrize(
    "config",
    [
        {**AUTO, "zero_optimization": {"stage": 1}},
        {**AUTO, "zero_optimization": {"stage": 3}},
        {**AUTO, "zero_optimization": {"stage": 2}, "train_batch_size": 16},
        {**AUTO, "zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}},
        {
            **AUTO,
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
            "optimizer": {"type": "Lion"},
        },
        {**AUTO, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}},
    ],
)
def test_a_deepspeed_config_that_trains_plans(tmp_path, config):
    assert _validate(tmp_path, config) == []


def test_a_deepspeed_file_that_is_missing_or_broken_is_named(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"zero_optimization": {"stage": 2},')
    (error,) = _validate(tmp_path, str(broken))
    assert f"trainer.deepspeed = '{broken}': the file does not parse as JSON" in error
    (error,) = _validate(tmp_path, str(tmp_path / "missing.json"))
    assert "no such file" in error
    good = tmp_path / "zero3.json"
    good.write_text(json.dumps({**AUTO, "zero_optimization": {"stage": 3}}))
    assert _validate(tmp_path, str(good)) == []


def test_fsdp_on_cpu_is_refused(tmp_path):
    """accelerate ignores FSDP on CPU and trains DDP (harness.config.scale's note has the measurement)."""
    (error,) = _validate(tmp_path, extra='grid: {trainer.fsdp: ["full_shard auto_wrap"]}\n')
    assert "trainer.fsdp = 'full_shard auto_wrap' on cpu" in error and "plain DDP" in error


@pytest.mark.parametrize(
    "config, said",
    [
        ({**AUTO, "zero_optimization": {"stage": "3"}}, "zero_optimization.stage = '3' must be the integer"),
        (
            {**AUTO, "zero_optimisation": {"stage": 2}},
            "unknown key 'zero_optimisation' = {'stage': 2}: DeepSpeed ignores a top-level key it does not "
            "know, so this setting would not apply; did you mean 'zero_optimization'? Rename it (accelerate "
            "requires a zero_optimization block).",
        ),
        ({**AUTO, "zero_optimization": [1]}, "zero_optimization = [1] must be a mapping"),
        ({**Z2, "optimizer": {"type": 3}}, "optimizer = {'type': 3} must be a mapping with a type name"),
        (
            {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "8"},
            "= '8' must be a number or 'auto'",
        ),
    ],
)
def test_a_deepspeed_config_of_the_wrong_shape_is_named(tmp_path, config, said):
    """A ZeRO stage written "3" trains sharded while accelerate and the harness take it for no
    ZeRO-3 (measured: the run hung at its first evaluation); the others failed at start."""
    errors = _validate(tmp_path, config)
    assert len(errors) == 1 and said in errors[0], errors


def test_a_folder_is_not_a_missing_file(tmp_path):
    (error,) = _validate(tmp_path, str(tmp_path))
    assert "is a folder" in error


def test_report_to_names_an_integration_transformers_knows(tmp_path):
    (error,) = _validate(tmp_path, extra="grid: {trainer.report_to: [[foo, tensorboard]]}\n")
    assert "trainer.report_to names 'foo', which transformers does not know" in error


@pytest.mark.parametrize(
    "config, said",
    [
        (
            {
                "train_micro_batch_size_per_gpus": 8,
                "gradient_accumulation_steps": "auto",
                **{"zero_optimization": {"stage": 2}},
            },
            "trainer.deepspeed: unknown key 'train_micro_batch_size_per_gpus' = 8: DeepSpeed ignores a top-level key "
            "it does not know, so this setting would not apply; did you mean 'train_micro_batch_size_per_gpu'? "
            "Rename it.",
        ),
        (
            {**Z2, "gradiant_clipping": 1.0},
            "unknown key 'gradiant_clipping' = 1.0: DeepSpeed ignores a top-level key it does not know, so this "
            "setting would not apply; did you mean 'gradient_clipping'? Rename it.",
        ),
        (
            {**Z2, "bogus_block": {"x": 1}},
            "unknown key 'bogus_block' = {'x': 1}: DeepSpeed ignores a top-level key it does not know, so this "
            "setting would not apply; drop it, or give it as DeepSpeed's documentation names it",
        ),
        (
            {**AUTO, "zero_optimization": {"stgae": 2}},
            "DeepSpeed refuses zero_optimization.stgae = 2: Extra inputs are not permitted; did you mean "
            "zero_optimization.stage? Rename it.",
        ),
        (
            {**AUTO, "zero_optimization": {"stage": 2, "offload_optimizer": {"devcie": "cpu"}}},
            "DeepSpeed refuses zero_optimization.offload_optimizer.devcie = 'cpu': Extra inputs are not permitted; "
            "did you mean zero_optimization.offload_optimizer.device? Rename it.",
        ),
    ],
    ids=["micro-batch", "clipping", "no-close-key", "zero-stage", "offload-device"],
)
def test_a_key_deepspeed_would_ignore_or_refuse_is_named_with_the_closest(tmp_path, config, said):
    errors = _validate(tmp_path, config)
    assert len(errors) == 1 and said in errors[0], errors


def test_a_deepspeed_config_file_with_a_misspelt_key_is_refused(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**AUTO, "zero_optimisation": {"stage": 2}}))
    (error,) = _validate(tmp_path, str(path))
    assert error.startswith(f"trainer.deepspeed = '{path}': unknown key 'zero_optimisation' = {{'stage': 2}}")
    assert (
        "did you mean 'zero_optimization'? Rename it (accelerate requires a zero_optimization block)."
        in error
    )


def test_the_fallback_keys_hold_every_key_the_installed_deepspeed_reads():
    """The keys come from DeepSpeed's own parser; the list for machines without deepspeed must not
    refuse a key it reads (update FALLBACK_TOP_LEVEL_KEYS with the lock's deepspeed)."""
    from harness.config import scale

    read = scale._keys_deepspeed_reads()
    assert {"zero_optimization", "train_micro_batch_size_per_gpu", "fp16", "bf16", "optimizer"} <= read
    assert read <= scale.FALLBACK_TOP_LEVEL_KEYS, sorted(read - scale.FALLBACK_TOP_LEVEL_KEYS)
    assert scale.top_level_keys() == read | scale.FALLBACK_TOP_LEVEL_KEYS
