"""Unit tests of harness.models.tasks: validation, splits, prompts, answers, rewards and greedy accuracy."""

from __future__ import annotations

import json

import pytest
import torch

from harness import rewards
from harness.models.tasks import (
    bare_prompt,
    build_task,
    check_task,
    extract_answer,
    greedy_accuracy,
    resolve_template,
)
from harness.models.tiny import build_tokenizer
from harness.settings.schema import EVAL_SEED, REWARD_NAMES, SpecError, TaskSpec

SUM = TaskSpec("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 1}, train_size=64, eval_size=32)


# ---------------------------------------------------------------------------------------------- check_task


def test_check_task_accepts_valid_spec():
    assert check_task(SUM) == []
    assert check_task(TaskSpec("chain_sum", {}, rewards=("correctness", "format"))) == []


def test_check_task_unknown_dataset_lists_close_matches():
    (msg,) = check_task(TaskSpec("chain_sums", {}))
    assert "chain_sums" in msg and "chain_sum" in msg


def test_check_task_reports_kwargs_the_dataset_rejects():
    (unknown,) = check_task(TaskSpec("chain_sum", {"no_such_option": 1}))
    assert "no_such_option" in unknown
    (invalid,) = check_task(TaskSpec("chain_sum", {"min_terms": 3, "max_terms": 2}))
    assert "max_terms must be >= min_terms" in invalid


def test_task_spec_refuses_reserved_kwargs():
    with pytest.raises(SpecError) as e:
        TaskSpec("chain_sum", {"seed": 3})
    (msg,) = e.value.problems
    assert msg.startswith("task.kwargs = {'seed': 3} must not set seed or size")


def test_task_spec_malformed_reward_entries_are_named():
    with pytest.raises(SpecError) as e:
        TaskSpec("chain_sum", {}, rewards=("correctness", {"weight": 2.0}))
    (msg,) = e.value.problems
    assert (
        msg.startswith("task.rewards[1] = {'weight': 2.0}: the mapping has no name")
        and "{name: soft_overlong" in msg
    )
    with pytest.raises(SpecError) as e:
        TaskSpec("chain_sum", {}, rewards=("correctness", {"name": "correctness", "weight": 2.0}))
    assert "repeats correctness; give each reward once" in e.value.problems[0]


def test_reward_entries_give_names_weights_and_settings():
    spec = TaskSpec(
        "chain_sum",
        {},
        rewards=["correctness", {"name": "soft_overlong", "weight": 0.5, "soft_punish_cache": 8}],
    )
    assert spec.reward_names == ("correctness", "soft_overlong")
    assert spec.reward_weights == (1.0, 0.5)
    assert spec.reward_settings("soft_overlong") == {"soft_punish_cache": 8}
    assert TaskSpec("chain_sum", {}, rewards=["correctness", "format"]).reward_weights is None


def test_task_spec_other_fields_each_named():
    with pytest.raises(SpecError) as e:
        TaskSpec("chain_sum", {}, template="plain", train_size=0, eval_size=0, rewards=())
    assert [p.split(" = ")[0] for p in e.value.problems] == [
        "task.template",
        "task.train_size",
        "task.eval_size",
        "task.rewards",
    ]


def test_reward_registry_holds_the_schemas_builtins():
    for name in REWARD_NAMES:
        plugin, problems = rewards.find(name)
        assert plugin is not None and plugin.name == name and not problems


# ---------------------------------------------------------------------------------------------- prompts


def test_extract_answer_bare():
    assert extract_answer(" -12 ", "bare") == "-12"
    assert extract_answer("7\n3 + 4=", "bare") == "7"
    assert extract_answer("7<eos><pad>", "bare") == "7"
    assert extract_answer("", "bare") is None
    assert extract_answer("  \nx", "bare") is None


def test_extract_answer_chat():
    assert extract_answer("so <answer> 5 </answer>", "chat") == "5"
    assert extract_answer("<answer>1</answer> no, <answer>2</answer>", "chat") == "2"
    assert extract_answer("5", "chat") is None
    assert extract_answer("<answer></answer>", "chat") is None
    with pytest.raises(ValueError):
        extract_answer("5", "auto")


def test_resolve_template():
    class Chatty:
        chat_template = "{{ messages }}"

    assert resolve_template("auto") == "bare"
    assert resolve_template("auto", Chatty()) == "chat"
    assert resolve_template("bare", Chatty()) == "bare"
    with pytest.raises(ValueError):
        resolve_template("plain")


def test_bare_prompt_uses_expression_else_question():
    assert bare_prompt({"question": "long text", "metadata": {"expression": "4 - 1"}}) == "4 - 1="
    assert bare_prompt({"question": "How many legs?", "metadata": {}}) == "How many legs?"


# ---------------------------------------------------------------------------------------------- build_task


def test_build_task_bare_splits_and_columns():
    task = build_task(SUM, seed=0)
    assert task.template == "bare"
    assert task.train_dataset.column_names == ["prompt", "entry"]
    assert len(task.train_dataset) == 64
    assert len(task.eval_prompts) == len(task.eval_entries) == 32
    prompt = task.train_dataset[0]["prompt"]
    entry = json.loads(task.train_dataset[0]["entry"])
    assert prompt == entry["metadata"]["expression"] + "="
    assert len(prompt) <= 6  # "d ± d="
    assert task.eval_prompts[0] == bare_prompt(task.eval_entries[0])
    assert 0.0 <= task.eval_overlap <= 1.0


def test_build_task_seeds_change_training_but_not_eval():
    big = TaskSpec(
        "chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 3}, train_size=64, eval_size=32
    )
    a, b = build_task(big, seed=0), build_task(big, seed=1)
    assert a.train_dataset["prompt"] != b.train_dataset["prompt"]
    assert a.eval_prompts == b.eval_prompts
    # Disjoint generator seeds: with 3-digit operands, repeats are (nearly) impossible.
    assert a.eval_overlap < 0.1
    with pytest.raises(ValueError):
        build_task(big, seed=EVAL_SEED)


def test_build_task_rejects_invalid_spec():
    with pytest.raises(ValueError, match="unknown reasoning-gym dataset"):
        build_task(TaskSpec("nope", {}), seed=0)


def test_build_task_chat_prompts_are_conversations():
    task = build_task(TaskSpec("chain_sum", {}, template="chat", train_size=4, eval_size=2), seed=0)
    prompt = task.train_dataset[0]["prompt"]
    assert [m["role"] for m in prompt] == ["system", "user"]
    assert "<answer>" in prompt[0]["content"]
    assert prompt[1]["content"] == json.loads(task.train_dataset[0]["entry"])["question"]


def test_reward_functions_score_with_the_dataset():
    spec = TaskSpec(**{**SUM.__dict__, "rewards": ("correctness", "format")})
    task = build_task(spec, seed=0)
    funcs = rewards.reward_funcs(task, 16)
    assert [f.__name__ for f in funcs] == ["correctness", "format"]
    rows = task.train_dataset[:2]
    answers = [json.loads(e)["answer"] for e in rows["entry"]]
    completions = [answers[0], f"{int(answers[1]) + 1}\nmore"]
    correctness, fmt = (
        f(prompts=rows["prompt"], completions=completions, entry=rows["entry"]) for f in funcs
    )
    assert correctness == [1.0, 0.0]
    assert fmt == [1.0, 0.0]
    entry = json.loads(rows["entry"][0])
    assert task.score(f" {answers[0]}", entry) == 1.0
    assert task.score("", entry) == 0.0


def test_chat_reward_reads_answer_tags_from_messages():
    task = build_task(TaskSpec("chain_sum", {}, template="chat", train_size=2, eval_size=2), seed=0)
    rows = task.train_dataset[:1]
    answer = json.loads(rows["entry"][0])["answer"]
    completions = [[{"role": "assistant", "content": f"thinking... <answer>{answer}</answer>"}]]
    (correctness,) = rewards.reward_funcs(task, 16)
    assert correctness(prompts=rows["prompt"], completions=completions, entry=rows["entry"]) == [1.0]


# ---------------------------------------------------------------------------------------------- greedy_accuracy


class _OracleLM(torch.nn.Module):
    """Writes the true answer of each (left-padded) bare prompt, then eos, then pads; or garbage."""

    def __init__(self, tokenizer, correct: bool):
        super().__init__()
        self.tokenizer = tokenizer
        self.correct = correct
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def generate(self, input_ids, attention_mask, generation_config):
        assert generation_config.do_sample is False
        # Left padding: every row's prompt ends at the last column.
        assert bool(attention_mask[:, -1].all())
        rows = []
        for ids, mask in zip(input_ids, attention_mask, strict=True):
            prompt = self.tokenizer.decode(ids[mask.bool()])
            value = eval(prompt.rstrip("="))  # the prompts are "d ± d="
            text = str(value if self.correct else value + 1)
            rows.append(self.tokenizer(text)["input_ids"] + [self.tokenizer.eos_token_id])
        width = max(map(len, rows)) + 1
        rows = [r + [self.tokenizer.pad_token_id] * (width - len(r)) for r in rows]
        return torch.cat([input_ids, torch.tensor(rows)], dim=1)


@pytest.fixture(scope="module")
def char_tokenizer():
    return build_tokenizer(list("0123456789+- ="), model_max_length=32)


@pytest.mark.parametrize("correct,expected", [(True, 1.0), (False, 0.0)])
def test_greedy_accuracy_left_pads_decodes_and_scores(char_tokenizer, correct, expected):
    task = build_task(SUM, seed=0)
    model = _OracleLM(char_tokenizer, correct)
    model.train()
    assert greedy_accuracy(model, char_tokenizer, task, max_new_tokens=4, batch_size=5) == expected
    assert model.training  # mode restored
    model.eval()
    greedy_accuracy(model, char_tokenizer, task, max_new_tokens=4)
    assert not model.training


def test_greedy_accuracy_real_model_in_unit_interval(char_tokenizer):
    from harness.models.tiny import TinyModelSpec, build_model

    torch.manual_seed(0)
    model = build_model(
        TinyModelSpec(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2), char_tokenizer
    )
    acc = greedy_accuracy(model, char_tokenizer, build_task(SUM, seed=0), max_new_tokens=3)
    assert 0.0 <= acc <= 1.0
    assert model.training


def test_greedy_accuracy_chat_template(char_tokenizer):
    from harness.models.tiny import TinyModelSpec, build_model

    tok = build_tokenizer(list("0123456789+- =<>/abcdefghijklmnopqrstuvwxyz"), model_max_length=512)
    tok.chat_template = (
        "{% for m in messages %}{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    )
    task = build_task(
        TaskSpec("chain_sum", {}, template="auto", train_size=4, eval_size=3), seed=0, tokenizer=tok
    )
    assert task.template == "chat"
    assert task.prompt_text(task.eval_prompts[0], tok).endswith("=\n>")
    torch.manual_seed(0)
    model = build_model(TinyModelSpec(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2), tok)
    assert greedy_accuracy(model, tok, task, max_new_tokens=2) == 0.0  # no <answer> tag in 2 tokens
    with pytest.raises(ValueError):
        greedy_accuracy(model, char_tokenizer, task, max_new_tokens=2)
