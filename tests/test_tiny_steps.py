"""The reasoning testbed ``tiny-steps`` (harness.models.tiny_steps) and the ``steps`` template.

Exact checks of the chain format and its errors (hand-written chains), the answer reader and the
rewards of the template, the per-step length metrics of correct and incorrect completions, the
validation rules that tie the model to its template, and a small build through the cache.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from helpers import SMALL_MODEL

from harness import rewards
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.models import tiny_steps
from harness.models.names import resolve_model
from harness.models.tasks import (
    LENGTH_CORRECT,
    LENGTH_INCORRECT,
    build_task,
    extract_answer,
    steps_prompt,
)
from harness.models.tiny_steps import noisy_chain, parse_terms, worked_chain
from harness.settings.schema import TINY, TINY_STEPS, SpecError, TaskSpec, TinyStepsModelSpec

TASK = TaskSpec(
    name="chain_sum",
    kwargs={"min_terms": 3, "max_terms": 5, "min_digits": 1, "max_digits": 1},
    template="steps",
    train_size=64,
    eval_size=16,
)
SMALL = TinyStepsModelSpec(**{**SMALL_MODEL, "max_position_embeddings": 128})


def test_terms_and_chain_by_hand():
    assert parse_terms("0 - 4 - 8 - 7") == (0, [("-", 4), ("-", 8), ("-", 7)])
    assert parse_terms("12+3-40") == (12, [("+", 3), ("-", 40)])
    with pytest.raises(ValueError, match="not integers joined"):
        parse_terms("3 * 4")
    first, terms = parse_terms("0 - 4 - 8 - 7")
    assert worked_chain(first, terms) == ("0-4=-4;-4-8=-12;-12-7=-19;#-19", -19)
    # a wrong step is carried on; a redundant step is written twice and changes nothing
    assert worked_chain(first, terms, wrong_step=(1, 2)) == ("0-4=-4;-4-8=-10;-10-7=-17;#-17", -17)
    assert worked_chain(first, terms, redundant_step=0) == ("0-4=-4;0-4=-4;-4-8=-12;-12-7=-19;#-19", -19)


def test_noise_kinds_move_length_and_correctness_apart():
    """Each kind of error at probability 1, alone: skip is shorter and wrong, repeat longer and wrong,
    redundant longer and right, a wrong step the same length and wrong."""
    expression, clean = "5 + 9 + 7", "5+9=14;14+7=21;#21"
    none = {"label_noise": 0.0, "skip_noise": 0.0, "repeat_noise": 0.0, "redundant_noise": 0.0}
    assert noisy_chain(expression, TinyStepsModelSpec(**none), random.Random(0)) == clean

    def steps(chain):
        return chain.count(";")

    for kind, length, right in (
        ("skip_noise", -1, False),
        ("repeat_noise", (1, 2, 3), False),
        ("redundant_noise", +1, True),
        ("label_noise", 0, False),
    ):
        spec = TinyStepsModelSpec(**{**none, kind: 1.0})
        for seed in range(20):
            chain = noisy_chain(expression, spec, random.Random(seed))
            grown = steps(chain) - steps(clean)
            assert grown in length if isinstance(length, tuple) else grown == length, (kind, chain)
            assert (extract_answer(chain, "steps") == "21") is right, (kind, chain)


def test_sft_data_mixes_lengths_within_right_and_wrong_chains():
    pairs = tiny_steps.steps_sft_pairs(TinyStepsModelSpec(sft_examples=400), TASK)
    task = build_task(TASK, 0)
    rows = []
    for prompt, chain in pairs:
        expression = prompt[:-1]
        entry = {"answer": str(eval(expression)), "metadata": {"expression": expression}}
        rows.append((chain.count(";"), task.score(chain, entry) == 1.0, len(parse_terms(expression)[1])))
    # relative to the clean number of steps (terms - 1 steps, plus the answer)
    extra = {(d - t, ok) for d, ok, t in rows}
    assert {(-1, False), (0, True), (0, False), (1, True), (1, False), (2, False), (3, False)} <= extra
    right = sum(ok for _, ok, _ in rows) / len(rows)
    assert 0.35 < right < 0.75  # noise defaults: about half the chains are right


def test_steps_template_prompt_answer_and_rewards():
    entry = {"question": "...", "answer": "-19", "metadata": {"expression": "0 - 4 - 8 - 7"}}
    assert steps_prompt(entry) == "0-4-8-7="
    assert extract_answer("0-4=-4;-4-8=-12;#-12<eos>", "steps") == "-12"
    assert extract_answer("0-4=-4;-4-8=-12;#-12;#-19\n", "steps") == "-19"  # the last answer counts
    assert extract_answer("0-4=-4;-4-8=-12", "steps") is None
    task = build_task(TASK, 0)
    (correctness,) = rewards.reward_funcs(task, 64)
    e = task.train_dataset[0]["entry"]
    answer = json.loads(e)["answer"]
    completions = [f"1+1=2;#{answer}", "1+1=2;#999", f"1+1=2;2+2=4;2+2=4;#{answer}"]
    logged: list[tuple[str, float]] = []
    scores = correctness(
        prompts=[""] * 3,
        completions=completions,
        entry=[e] * 3,
        completion_ids=[[0] * 5, [0] * 7, [0] * 11],
        log_metric=lambda name, value: logged.append((name, value)),
    )
    assert scores == [1.0, 0.0, 1.0]
    # one logged value per completion: TRL's total / count is then the mean over completions
    assert sorted(logged) == [(LENGTH_CORRECT, 5.0), (LENGTH_CORRECT, 11.0), (LENGTH_INCORRECT, 7.0)]
    fmt_task = build_task(TaskSpec(**{**TASK.__dict__, "rewards": ("format",)}), 0)
    (fmt,) = rewards.reward_funcs(fmt_task, 64)
    assert fmt(prompts=[""] * 3, completions=["1+1=2;#2", "1+1=2;#2;3", "1+1=2"]) == [1.0, 0.0, 0.0]


def _validate(tmp_path: Path, model: str, template: str, **extra):
    task = {**TASK.__dict__, "kwargs": dict(TASK.kwargs), "template": template, "rewards": list(TASK.rewards)}
    data = {
        "name": "g",
        "seed": 0,
        "model": model,
        "task": task,
        "trainer": {"max_completion_length": 64, "max_steps": 10},
    }
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump({**data, **extra}))
    return validate_plan(expand(load_grid(path)))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "template", "needle"),
    [
        (TINY_STEPS, "bare", "task.template = 'bare' with model 'tiny-steps'"),
        (TINY_STEPS, "auto", "set task.template: steps"),
        (TINY, "steps", "use model: tiny-steps"),
    ],
)
def test_the_testbed_and_its_template_go_together(tmp_path, model, template, needle):
    report = _validate(tmp_path, model, template)
    assert needle in report.format(), report.format()


def test_section_rules_and_context_check(tmp_path):
    with pytest.raises(SpecError, match=r"tiny_steps.skip_noise = 1.5 is a fraction"):
        TinyStepsModelSpec(skip_noise=1.5)
    report = _validate(tmp_path, TINY_STEPS, "steps", tiny_steps={"max_position_embeddings": 24})
    assert "tiny_steps.max_position_embeddings = 24" in report.format()
    fine = _validate(tmp_path, TINY_STEPS, "steps")
    assert fine.ok, fine.format()


@pytest.mark.slow
def test_small_build_is_cached_and_keyed(tmp_path):
    path = Path(resolve_model(TINY_STEPS, task=TASK, cache_dir=tmp_path, tiny_spec=SMALL))
    assert path.name == tiny_steps.tiny_steps_model_key(SMALL, TASK)
    assert path.name.startswith("tiny-steps-chain_sum-")
    info = json.loads((path / "tiny_model.json").read_text())
    assert info["model"] == "tiny-steps" and set(";#=+-") <= set(info["alphabet"])
    chains = info["sft_chain_tokens"]
    assert chains["p05"] < chains["median"] < chains["p95"] <= info["longest_sft_sequence"]
    # the same spec resolves to the same folder without building; another spec to another key
    assert resolve_model(TINY_STEPS, task=TASK, cache_dir=tmp_path, tiny_spec=SMALL) == str(path)
    other = TinyStepsModelSpec(**{**SMALL_MODEL, "max_position_embeddings": 128, "repeat_noise": 0.3})
    assert tiny_steps.tiny_steps_model_key(other, TASK) != path.name
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    text = "0-4-8-7=0-4=-4;-4-8=-12;#-12"
    assert tok.decode(tok(text)["input_ids"]) == text and len(tok(text)["input_ids"]) == len(text)


@pytest.mark.slow
def test_the_warm_start_does_not_depend_on_the_thread_count(tmp_path):
    """A build runs BUILD_THREADS threads whatever the run's threads, and puts the run's threads back;
    a build inside a one-thread run is the same bit for bit as one inside a three-thread run."""
    import torch
    from safetensors.torch import load_file

    from harness.models.tiny import BUILD_THREADS
    from harness.models.tiny_steps import build_tiny_steps_model

    task = TaskSpec(
        name="chain_sum",
        kwargs={"min_terms": 3, "max_terms": 3, "max_digits": 1},
        train_size=64,
        eval_size=16,
    )
    spec = TinyStepsModelSpec(**{**SMALL_MODEL, "sft_steps": 8})
    before = torch.get_num_threads()
    weights = []
    for run_threads in (1, 3):
        torch.set_num_threads(run_threads)
        info = build_tiny_steps_model(spec, task, tmp_path / f"m{len(weights)}")
        assert torch.get_num_threads() == run_threads  # the run's threads are back
        assert info["sft_threads"] == BUILD_THREADS
        weights.append(load_file(tmp_path / f"m{len(weights)}" / "model.safetensors"))
    torch.set_num_threads(before)
    assert weights[0].keys() == weights[1].keys()
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name
