"""The reasoning testbed ``tiny-steps``: a tiny model that works a multi-term sum out step by step.

Built entirely locally (no hub access) and cached like ``tiny`` (:mod:`harness.models.tiny`: the same
cache folder, a key from the spec, the task's dataset and the library versions, a file lock and a
temporary folder renamed into place). The task is reasoning-gym's ``chain_sum`` (or any dataset
whose items carry an ``expression`` of integers joined by ``+`` and ``-``) in the ``steps``
template: the prompt is the expression without spaces, ``"0-4-8-7="``, and a completion is the chain
of partial sums, one step per term, then the answer after ``#``::

    0-4=-4;-4-8=-12;-12-7=-19;#-19

Only the answer after the last ``#`` is scored, by the dataset's own ``score_answer``. With 3 to 5
one-digit terms a chain is 20 to 40 characters (tokens: the tokenizer is :mod:`harness.models.tiny`'
character-level one).

The warm start is TRL's ``SFTTrainer`` on chains with four kinds of error, each drawn independently
per chain (fractions in :class:`harness.settings.schema.TinyStepsModelSpec`):

* a wrong step (``label_noise``): one partial sum off by ±1 or ±2, and the chain goes on from it;
* a skipped term (``skip_noise``): one step shorter, wrong;
* a repeated term (``repeat_noise``): applied 1 to :data:`MAX_REPEATS` extra times, as many steps
  longer, wrong;
* a redundant step (``redundant_noise``): one step written twice, one step longer and still right.

So the warm-started policy writes chains of several lengths, right and wrong at each length: length
and correctness can move apart under RL, which is what length-normalisation effects (Dr. GRPO,
arXiv:2503.20783) need, and ``max_completion_length`` can sit well above a chain's typical length.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from harness.models import tiny as models
from harness.models.build_progress import BuildWatch, Report
from harness.models.tasks import check_task, generate_entries, steps_prompt
from harness.models.tiny import (
    BUILD_THREADS,
    CORPUS_SPLITS,
    _library_versions,
    begin_build,
    build_model,
    build_tokenizer,
    cached_build,
    split_entries,
    warm_start_and_save,
)
from harness.settings.schema import SFT_SEED_BASE, TINY_STEPS, TaskSpec, TinyStepsModelSpec

#: What separates two steps, and what comes before the answer.
STEP_SEPARATOR = ";"
ANSWER_MARKER = "#"
#: A repeated term is applied again 1 to this many times (uniformly): chains too long by up to as
#: many steps, so that wrong chains span a wide range of lengths.
MAX_REPEATS = 3
# Bump when the build recipe changes in a way the spec does not capture.
STEPS_BUILD_FORMAT = 2

_TERM_RE = re.compile(r"([+-])(\d+)")


def parse_terms(expression: str) -> tuple[int, list[tuple[str, int]]]:
    """``(first term, [(operator, term), ...])`` of an expression of integers joined by ``+``/``-``.

    ``"0 - 4 - 8 - 7"`` gives ``(0, [("-", 4), ("-", 8), ("-", 7)])``.

    Raises:
        ValueError: the expression is not of that form.
    """
    text = expression.replace(" ", "")
    head = re.match(r"-?\d+", text)
    if head is None or _TERM_RE.sub("", text[head.end() :]):
        raise ValueError(f"expression {expression!r} is not integers joined by + and -")
    return int(head.group()), [(op, int(t)) for op, t in _TERM_RE.findall(text[head.end() :])]


def _apply(acc: int, op: str, term: int) -> int:
    return acc + term if op == "+" else acc - term


def worked_chain(
    first: int,
    terms: list[tuple[str, int]],
    wrong_step: tuple[int, int] | None = None,
    redundant_step: int | None = None,
) -> tuple[str, int]:
    """The chain of partial sums of ``first`` and ``terms``, and the answer it ends on.

    Args:
        first: the first term.
        terms: ``(operator, term)`` per step, in order.
        wrong_step: ``(step index, offset)``: that step's result is off by ``offset`` and the chain
            goes on from the wrong value.
        redundant_step: index of a step written twice.

    Returns:
        ``("a+b=c;c-d=e;#e", e)``: steps joined by :data:`STEP_SEPARATOR`, then :data:`ANSWER_MARKER`
        and the answer (no eos).
    """
    acc, steps = first, []
    for i, (op, term) in enumerate(terms):
        new = _apply(acc, op, term)
        if wrong_step is not None and wrong_step[0] == i:
            new += wrong_step[1]
        step = f"{acc}{op}{term}={new}"
        steps += [step, step] if redundant_step == i else [step]
        acc = new
    return STEP_SEPARATOR.join([*steps, f"{ANSWER_MARKER}{acc}"]), acc


def noisy_chain(expression: str, spec: TinyStepsModelSpec, rng: random.Random) -> str:
    """A worked chain for ``expression`` with the errors of ``spec`` drawn from ``rng`` (see the
    module docstring); the chain a clean draw gives is :func:`worked_chain` of the parsed terms."""
    first, terms = parse_terms(expression)
    terms = list(terms)
    if len(terms) > 1 and rng.random() < spec.skip_noise:
        del terms[rng.randrange(len(terms))]
    if rng.random() < spec.repeat_noise:
        i = rng.randrange(len(terms))
        terms[i:i] = [terms[i]] * rng.randint(1, MAX_REPEATS)
    wrong = None
    if rng.random() < spec.label_noise:
        wrong = (rng.randrange(len(terms)), rng.choice((-2, -1, 1, 2)))
    redundant = rng.randrange(len(terms)) if rng.random() < spec.redundant_noise else None
    return worked_chain(first, terms, wrong, redundant)[0]


def steps_sft_pairs(spec: TinyStepsModelSpec, task: TaskSpec) -> list[tuple[str, str]]:
    """The SFT (prompt, chain) pairs: ``spec.sft_examples`` items (generator seeds from
    :data:`harness.settings.schema.SFT_SEED_BASE`, disjoint from every run's splits), noisy chains, no eos.

    Raises:
        ValueError: the task spec is invalid, or an item has no ``+``/``-`` expression.
    """
    _, entries = generate_entries(task, SFT_SEED_BASE + spec.seed, spec.sft_examples)
    rng = random.Random(spec.seed)
    return [(steps_prompt(e), noisy_chain(e["metadata"]["expression"], spec, rng)) for e in entries]


def tiny_steps_model_key(spec: TinyStepsModelSpec, task: TaskSpec) -> str:
    """Cache folder name of the testbed model for ``task``: ``tiny-steps-<dataset>-<16 hex digits>``.

    Keyed by the spec, the task's dataset (name, kwargs), the chain's format and the library
    versions; the task's template, split sizes and rewards do not change the build.
    """
    payload = {
        "format": STEPS_BUILD_FORMAT,
        "build_threads": BUILD_THREADS,
        "spec": dataclasses.asdict(spec),
        "task": {"name": task.name, "kwargs": dict(task.kwargs)},
        "chain": [STEP_SEPARATOR, ANSWER_MARKER],
        "versions": _library_versions(),
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    safe_name = re.sub(r"[^\w.-]", "_", task.name)
    return f"tiny-steps-{safe_name}-{digest[:16]}"


def _alphabet(task: TaskSpec, pairs: list[tuple[str, str]]) -> list[str]:
    chars: set[str] = set(STEP_SEPARATOR + ANSWER_MARKER + "0123456789+-=")
    for e in split_entries(task, CORPUS_SPLITS):
        chars.update(steps_prompt(e))
    for prompt, chain in pairs:
        chars.update(prompt + chain)
    return sorted(chars)


def _sft_data(
    spec: TinyStepsModelSpec, task: TaskSpec, model_max_length: int | None = None
) -> tuple[list[tuple[str, str]], list[str], Any, int, int]:
    """Pairs, alphabet, tokenizer, longest prompt and longest prompt + chain + eos (tokens)."""
    pairs = steps_sft_pairs(spec, task)
    alphabet = _alphabet(task, pairs)
    tokenizer = build_tokenizer(alphabet, model_max_length or spec.max_position_embeddings)
    prompt = max(len(tokenizer(p)["input_ids"]) for p, _ in pairs)
    longest = max(len(tokenizer(p + c)["input_ids"]) + 1 for p, c in pairs)
    return pairs, alphabet, tokenizer, prompt, longest


def sft_lengths(spec: TinyStepsModelSpec, task: TaskSpec) -> tuple[int, int, int]:
    """``(longest SFT prompt, longest SFT prompt + chain + eos, longest prompt of a run's splits)``
    in tokens (:func:`harness.models.tiny.sft_lengths` with this model's data and ``steps`` prompts),
    without building the model.

    Raises:
        ValueError: the task spec is invalid.
    """
    return models.sft_lengths(spec, task, _sft_data, steps_prompt)


def build_tiny_steps_model(
    spec: TinyStepsModelSpec, task: TaskSpec, out_dir: str | Path, report: Report | None = None
) -> dict:
    """Build the testbed model for ``task`` into ``out_dir`` (created; must not exist); return its info.

    Writes ``save_pretrained`` of model and tokenizer and ``tiny_model.json`` (spec, task, alphabet,
    chain lengths, SFT losses, build seconds); tells ``report`` how far it is
    (:class:`harness.models.build_progress.BuildReport`).

    Raises:
        ValueError: invalid task spec, or SFT sequences longer than ``spec.max_position_embeddings``.
        FileExistsError: ``out_dir`` exists.
    """
    out_dir, start = begin_build(spec, out_dir, report)
    pairs, alphabet, tokenizer, _, longest = _sft_data(spec, task)
    if longest > spec.max_position_embeddings:
        raise ValueError(
            f"SFT sequences reach {longest} tokens but tiny_steps.max_position_embeddings is "
            f"{spec.max_position_embeddings}; raise it"
        )
    model = build_model(spec, tokenizer)
    columns = {"prompt": [p for p, _ in pairs], "completion": [c for _, c in pairs]}
    lengths = sorted(len(c) + 1 for _, c in pairs)
    extra = {
        "model": "tiny-steps",
        "alphabet": alphabet,
        "longest_sft_sequence": longest,
        "sft_chain_tokens": {
            "median": lengths[len(lengths) // 2],
            "p05": lengths[len(lengths) // 20],
            "p95": lengths[-len(lengths) // 20],
        },
    }
    return warm_start_and_save(spec, task, model, tokenizer, columns, out_dir, start, extra, report)


def tiny_steps_model_path(
    spec: TinyStepsModelSpec, task: TaskSpec, cache_dir: str | Path, watch: BuildWatch | None = None
) -> Path:
    """Folder of the testbed model for ``task``, building and caching it on first use
    (:func:`harness.models.tiny.cached_build`, which tells ``watch`` how the build goes).

    Raises:
        ValueError: invalid task spec, or SFT sequences that do not fit the context.
    """
    problems = check_task(task)
    if problems:
        raise ValueError("invalid task spec: " + "; ".join(problems))
    key = tiny_steps_model_key(spec, task)
    return cached_build(
        cache_dir, key, lambda out, report: build_tiny_steps_model(spec, task, out, report), TINY_STEPS, watch
    )
