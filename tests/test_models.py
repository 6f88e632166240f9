"""Unit tests of harness.models.tiny: tokenizer, cached tiny-model build, model names, and GRPOTrainer compatibility."""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from pathlib import Path

import pytest
import torch
from helpers import SMALL_MODEL, SMALL_TASK

from harness.models import tiny as models
from harness.models.names import check_model, resolve_model
from harness.models.tasks import TaskSpec, bare_prompt, build_task, greedy_accuracy
from harness.models.tiny import (
    INFO_FILE,
    TinyModelSpec,
    build_tokenizer,
    noisy_answer,
    sft_pairs,
    tiny_model_key,
    tiny_model_path,
)

TASK = TaskSpec(**SMALL_TASK)
SMALL = TinyModelSpec(**SMALL_MODEL)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return tiny_model_path(SMALL, TASK, tmp_path_factory.mktemp("cache"))


# ---------------------------------------------------------------------------------------------- tokenizer


def test_tokenizer_is_character_level_with_distinct_specials():
    from transformers import PreTrainedTokenizerFast

    tok = build_tokenizer(list("0123456789+- ="), model_max_length=32)
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert len({tok.pad_token_id, tok.eos_token_id, tok.unk_token_id}) == 3
    ids = tok("12 + 3=")["input_ids"]
    assert len(ids) == 7  # one token per character, nothing added
    assert tok.decode(ids) == "12 + 3="
    assert tok.decode(tok("4<eos>")["input_ids"], skip_special_tokens=True) == "4"
    assert tok("x")["input_ids"] == [tok.unk_token_id]


def test_noisy_answer():
    rng = random.Random(0)
    assert all(noisy_answer("7", rng, 0.0) == "7" for _ in range(50))
    offsets = {int(noisy_answer("7", rng, 1.0)) - 7 for _ in range(200)}
    assert offsets == {-2, -1, 1, 2}
    assert noisy_answer("3/4", rng, 1.0) == "3/4"


def test_sft_pairs_noise_fraction():
    pairs = sft_pairs(TinyModelSpec(sft_examples=400, label_noise=0.5), TASK)
    task = build_task(TASK, seed=0)
    wrong = 0
    for prompt, answer in pairs:
        assert prompt.endswith("=")
        wrong += str(eval(prompt[:-1])) != answer
    assert 0.4 < wrong / len(pairs) < 0.6
    assert {p for p, _ in pairs} & set(task.eval_prompts)  # same problem space (1-digit sums)


# ---------------------------------------------------------------------------------------------- build + cache


@pytest.mark.slow
def test_tiny_model_loads_locally(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert tiny_dir.name == tiny_model_key(SMALL, TASK)
    tok = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)
    assert tok.pad_token == "<pad>" and tok.eos_token == "<eos>"
    assert model.config.vocab_size == len(tok)
    assert model.generation_config.eos_token_id == tok.eos_token_id
    info = json.loads((tiny_dir / INFO_FILE).read_text())
    assert info["spec"]["sft_steps"] == SMALL.sft_steps
    assert set("0123456789+-= ") <= set(info["alphabet"])
    acc = greedy_accuracy(model, tok, build_task(TASK, seed=0), max_new_tokens=3)
    assert 0.0 <= acc <= 1.0
    # what validation checks without building (sft_lengths) is what the loaded tokenizer counts
    pairs = sft_pairs(SMALL, TASK)
    prompt = max(len(tok(p)["input_ids"]) for p, _ in pairs)
    run_prompt = max(len(tok(bare_prompt(e))["input_ids"]) for e in models.split_entries(TASK))
    assert models.sft_lengths(SMALL, TASK) == (prompt, info["longest_sft_sequence"], run_prompt)


def test_a_run_tokenizes_as_the_warm_start_did(tiny_dir):
    """The tokenizer every run loads from the folder (AutoTokenizer: a Qwen2Tokenizer for a qwen2
    folder) gives the ids of the one the warm start trained with, spaces included, and decodes back."""
    from transformers import AutoTokenizer

    info = json.loads((tiny_dir / INFO_FILE).read_text())
    built = build_tokenizer(info["alphabet"], model_max_length=64)
    loaded = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    texts = [prompt + answer + "<eos>" for prompt, answer in sft_pairs(SMALL, TASK)[:200]]
    assert any(" " in t for t in texts)
    for text in texts:
        ids = loaded(text)["input_ids"]
        assert ids == built(text)["input_ids"], text
        assert loaded.decode(ids, skip_special_tokens=True) == text.removesuffix("<eos>")


def test_cache_key_depends_on_spec_and_dataset_only():
    other_sizes = TaskSpec(TASK.name, TASK.kwargs, train_size=5, eval_size=5, rewards=("format",))
    assert tiny_model_key(SMALL, TASK) == tiny_model_key(SMALL, other_sizes)
    assert tiny_model_key(SMALL, TASK) != tiny_model_key(TinyModelSpec(seed=1), TASK)
    harder = TaskSpec(TASK.name, {**TASK.kwargs, "max_digits": 2})
    assert tiny_model_key(SMALL, TASK) != tiny_model_key(SMALL, harder)


def test_second_call_reuses_cache(tiny_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("rebuilt a cached model")

    monkeypatch.setattr(models, "build_tiny_model", fail)
    assert tiny_model_path(SMALL, TASK, tiny_dir.parent) == tiny_dir


def _fake_build(spec, task, out_dir, report=None):
    # Stands in for the SFT build: slow enough for callers to overlap, and records who built.
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True)
    with open(out_dir.parent.parent / "builds.log", "a") as fh:
        fh.write("build\n")
    time.sleep(0.5)
    (out_dir / "config.json").write_text("{}")
    return {"build_seconds": 0.5}


def _call_in_child(cache_dir: str, queue) -> None:
    models.build_tiny_model = _fake_build
    queue.put(str(tiny_model_path(SMALL, TASK, cache_dir)))


def test_concurrent_processes_build_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_call_in_child, args=(str(tmp_path), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    paths = {queue.get(timeout=5) for _ in procs}
    assert len(paths) == 1
    (path,) = paths
    assert (Path(path) / "config.json").is_file()
    assert (tmp_path / "builds.log").read_text() == "build\n"
    # No temporary build folders are left behind.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [Path(path).name]


def test_failed_build_leaves_no_folder(tmp_path, monkeypatch):
    def broken(spec, task, out_dir, report=None):
        Path(out_dir).mkdir(parents=True)
        raise RuntimeError("boom")

    monkeypatch.setattr(models, "build_tiny_model", broken)
    with pytest.raises(RuntimeError, match="boom"):
        tiny_model_path(SMALL, TASK, tmp_path)
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []


def test_invalid_task_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset"):
        tiny_model_path(SMALL, TaskSpec("chain_sums", {}), tmp_path)


# ---------------------------------------------------------------------------------------------- model names


def test_check_and_resolve_model_names(tiny_dir, tmp_path):
    assert check_model("tiny") == []
    assert check_model(str(tiny_dir)) == []
    assert check_model("Qwen/Qwen2.5-0.5B-Instruct") == []  # hub id: not checked, never fetched
    assert "does not exist" in check_model("./no/such/model")[0]
    assert "does not exist" in check_model(str(tmp_path / "missing"))[0]
    assert "config.json" in check_model(str(tmp_path))[0]
    assert check_model("") != []

    assert resolve_model(str(tiny_dir)) == str(tiny_dir)
    assert resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert resolve_model("tiny", TASK, tiny_dir.parent, SMALL) == str(tiny_dir)
    with pytest.raises(ValueError):
        resolve_model("tiny")
    with pytest.raises(ValueError):
        resolve_model("./no/such/model")


# ---------------------------------------------------------------------------------------------- GRPO


def test_grpo_trainer_runs_on_tiny_model(tiny_dir, tmp_path):
    """TRL's own GRPOTrainer trains the built folder (the harness's trainer subclass aside)."""
    import dataclasses

    from trl import GRPOTrainer

    from harness.losses import grpo_config_kwargs
    from harness.settings.runs import RunSpec
    from harness.train.training import build_trainer
    from harness.trl_boundary import build_grpo_config

    trainer_settings = {
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "num_iterations": 2,
        "max_completion_length": 4,
        "max_steps": 2,
        "seed": 1,
    }
    task = {k: v for k, v in dataclasses.asdict(TASK).items()}
    settings = {"seed": 1, "model": str(tiny_dir), "task": task, "trainer": trainer_settings}
    spec = RunSpec(grid="t", settings={**settings, "harness": {"checkpoint_steps": 0}})
    torch.manual_seed(0)
    config = build_grpo_config(grpo_config_kwargs(spec, "cpu", str(tmp_path / "out")), "cpu")
    trainer, _, _ = build_trainer(spec, str(tiny_dir), config, trainer_class=GRPOTrainer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert logged and 0.0 <= logged[0]["reward"] <= 1.0
    assert logged[0]["completions/max_length"] <= 4
