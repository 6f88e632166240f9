"""Tasks from reasoning-gym: prompts, held-out eval split, the scoring of the built-in rewards, the
greedy accuracy and the sampled eval (pass@k).

A task is a reasoning-gym procedural dataset plus a prompt template:

* ``"bare"``: the prompt is the problem written as tersely as possible (for arithmetic datasets the
  expression followed by ``=``, e.g. ``"4 - 1="``) and the completion is the answer followed by the
  tokenizer's eos token. This is what the character-level tiny model (``harness.models.tiny``) is trained on.
* ``"steps"``: the prompt is the expression without spaces followed by ``=`` (``"0-4-8-7="``) and
  the completion a worked chain of partial sums ending in ``#`` and the answer
  (``"0-4=-4;-4-8=-12;-12-7=-19;#-19"``), what the reasoning testbed ``tiny-steps``
  (:mod:`harness.models.tiny_steps`) writes; the answer is read after the last ``#``.
* ``"chat"``: the prompt is a conversation (system instruction + reasoning-gym's English question) for an
  instruct model's chat template; the answer is read from ``<answer>...</answer>``.

Answers are always scored by the dataset's own ``score_answer``, so a task's reward has the meaning
reasoning-gym gives it, whatever the template.

Training and eval items are drawn from disjoint generator seeds: most reasoning-gym datasets seed item
``i`` with ``Random(seed + i)``, so the training split (seed ``seed``, items ``0..train_size-1``) and the
eval split (seed :data:`EVAL_SEED`, fixed for every run seed so accuracies compare across seeds) never
share a generator state as long as ``seed + train_size <= EVAL_SEED``. Small problem spaces (1-digit sums
have 200 distinct problems) still repeat the same *questions* in both splits; :attr:`Task.eval_overlap`
reports how often.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.settings.schema import EVAL_SEED, SFT_SEED_BASE, TEMPLATES, TaskSpec

# System prompt of the chat template; the answer tag is what extract_answer reads back.
CHAT_SYSTEM_PROMPT = (
    "Answer the question. Put only the final answer between <answer> and </answer> tags, "
    "for example <answer>42</answer>."
)

# Where a bare completion ends when it was decoded without skipping special tokens (or the model
# kept writing past the answer).
_BARE_END_MARKERS = ("\n", "<eos>", "</s>", "<|endoftext|>", "<|im_end|>")
_STEPS_ANSWER_MARKER = "#"  # harness.models.tiny_steps.ANSWER_MARKER
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", flags=re.DOTALL)


@dataclass
class Task:
    """A built task. Use :func:`build_task` rather than constructing one.

    Attributes:
        spec: the spec it was built from.
        seed: generator seed of the training split.
        template: the resolved template, ``"bare"`` or ``"chat"``.
        dataset: the reasoning-gym dataset object (its ``score_answer`` scores answers).
        train_dataset: columns ``"prompt"`` (str for bare, list of chat messages for chat) and
            ``"entry"`` (the reasoning-gym item as a JSON string), ``train_size`` rows.
        eval_prompts: held-out prompts in the same format as ``train_dataset["prompt"]``.
        eval_entries: the reasoning-gym items of ``eval_prompts``.
        eval_overlap: fraction of eval questions whose exact text also occurs in the training split.
    """

    spec: TaskSpec
    seed: int
    template: str
    dataset: Any
    train_dataset: Any  # datasets.Dataset
    eval_prompts: list
    eval_entries: list[dict]
    eval_overlap: float

    def score(self, completion: str, entry: dict) -> float:
        """Score one completion (text, eos already stripped) against a reasoning-gym item; in [0, 1]."""
        return float(self.dataset.score_answer(extract_answer(completion, self.template), entry))

    def prompt_text(self, prompt: str | list[dict], tokenizer: Any = None) -> str:
        """The exact text fed to the model for a prompt (chat prompts go through ``tokenizer``'s template).

        Raises:
            ValueError: a chat prompt without a tokenizer that has a chat template.
        """
        if isinstance(prompt, str):
            return prompt
        if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("chat prompts need a tokenizer with a chat template")
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


# --------------------------------------------------------------------------------------------------
# Prompts and answers


def resolve_template(template: str, tokenizer: Any = None) -> str:
    """Resolve ``"auto"`` to ``"chat"`` when ``tokenizer`` has a chat template, else ``"bare"``.

    Raises:
        ValueError: ``template`` is not one of :data:`TEMPLATES`.
    """
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; valid: {', '.join(TEMPLATES)}")
    if template != "auto":
        return template
    has_chat = tokenizer is not None and getattr(tokenizer, "chat_template", None) is not None
    return "chat" if has_chat else "bare"


def bare_prompt(entry: Mapping[str, Any]) -> str:
    """The terse prompt of a reasoning-gym item: ``"<expression>="`` when the item has one, else its question."""
    expression = entry.get("metadata", {}).get("expression")
    if isinstance(expression, str) and expression:
        return f"{expression}="
    return str(entry["question"])


def steps_prompt(entry: Mapping[str, Any]) -> str:
    """The ``steps`` template's prompt: the item's expression without spaces, then ``=``
    (``"0-4-8-7="``); the question when the item has no expression."""
    expression = entry.get("metadata", {}).get("expression")
    if isinstance(expression, str) and expression:
        return expression.replace(" ", "") + "="
    return str(entry["question"])


def chat_prompt(entry: Mapping[str, Any]) -> list[dict[str, str]]:
    """The conversation prompt of a reasoning-gym item: system instruction, then the question as the user."""
    return [
        {"role": "system", "content": CHAT_SYSTEM_PROMPT},
        {"role": "user", "content": str(entry["question"])},
    ]


def extract_answer(completion: str, template: str) -> str | None:
    """The answer written in a completion, or None when there is none.

    Args:
        completion: generated text, with or without special tokens.
        template: ``"bare"`` (answer = text up to the first newline or end marker, stripped),
            ``"steps"`` (the same, after the last ``#``; None without one) or ``"chat"`` (answer =
            content of the last ``<answer>...</answer>``, stripped).

    Raises:
        ValueError: ``template`` is not ``"bare"``, ``"steps"`` or ``"chat"``.
    """
    if template == "steps":
        cut = completion.rfind(_STEPS_ANSWER_MARKER)
        return None if cut == -1 else extract_answer(completion[cut + 1 :], "bare")
    if template == "bare":
        cut = len(completion)
        for marker in _BARE_END_MARKERS:
            pos = completion.find(marker)
            if pos != -1:
                cut = min(cut, pos)
        answer = completion[:cut].strip()
    elif template == "chat":
        matches = _ANSWER_RE.findall(completion)
        answer = matches[-1].strip() if matches else ""
    else:
        raise ValueError(f"extract_answer needs template 'bare' or 'chat', got {template!r}")
    return answer or None


def _completion_text(completion: str | list[dict]) -> str:
    # TRL passes conversational completions as a list holding one assistant message.
    if isinstance(completion, str):
        return completion
    return "".join(str(message.get("content", "")) for message in completion)


# --------------------------------------------------------------------------------------------------
# Rewards


#: Per-step metrics the correctness reward logs: the mean length (tokens, eos included, as TRL's
#: ``completions/mean_length``) of the completions it scores 1 and of the others, pooled over every
#: completion of the generation batch on every process (absent when there is none of that kind).
#: What Dr. GRPO (arXiv:2503.20783, Fig. 1) reads: the length of incorrect responses.
LENGTH_CORRECT = "completions/mean_length_correct"
LENGTH_INCORRECT = "completions/mean_length_incorrect"


def correctness_scores(
    task: Task,
    completions: list,
    entry: list[str],
    completion_ids: list | None = None,
    log_metric: Callable[[str, float], None] | None = None,
) -> list[float]:
    """The ``correctness`` reward: each completion scored by the dataset's own scorer
    (:meth:`Task.score`, in [0, 1]) against its item (``entry``, JSON). With ``completion_ids`` and
    TRL's ``log_metric``, also logs :data:`LENGTH_CORRECT` / :data:`LENGTH_INCORRECT`."""
    scores = [task.score(_completion_text(c), json.loads(e)) for c, e in zip(completions, entry, strict=True)]
    if completion_ids is not None and log_metric is not None:
        # TRL averages a logged metric over its calls on every process (total / count), so one
        # call per completion makes the pooled mean over completions.
        for score, ids in zip(scores, completion_ids, strict=True):
            log_metric(LENGTH_CORRECT if score == 1.0 else LENGTH_INCORRECT, float(len(ids)))
    return scores


def format_scores(task: Task, completions: list) -> list[float]:
    """The ``format`` reward: 1.0 for a well-formed answer regardless of its value, else 0.0. Bare:
    one non-empty line with nothing after; steps: a chain ending in ``#<answer>`` with nothing after
    (no step in the answer); chat: an ``<answer>`` tag pair holding something."""
    out = []
    for c in completions:
        text = _completion_text(c)
        answer = extract_answer(text, task.template)
        if task.template == "steps":
            ok = (
                answer is not None
                and not set(answer) & set(";=")
                and text.strip().endswith(_STEPS_ANSWER_MARKER + answer)
            )
        else:
            ok = answer is not None and (task.template == "chat" or text.strip() == answer)
        out.append(1.0 if ok else 0.0)
    return out


# --------------------------------------------------------------------------------------------------
# Validation and building


def _dataset_problems(spec: TaskSpec) -> list[str]:
    """reasoning-gym's verdict on ``spec.name`` and ``spec.kwargs``: builds one item (``size=1``)."""
    # imported here, not at module level: it takes ~1 s and validation usually finds the answer memoised
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    if spec.name not in DATASETS:
        close = difflib.get_close_matches(spec.name, list(DATASETS), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see reasoning_gym.factory.DATASETS"
        return [f"unknown reasoning-gym dataset {spec.name!r}{hint}"]
    try:
        ds = reasoning_gym.create_dataset(spec.name, seed=0, size=1, **dict(spec.kwargs))
        ds[0]
    except Exception as exc:  # the dataset's own validation: TypeError, AssertionError, ValueError...
        message = str(exc) or type(exc).__name__
        return [f"dataset {spec.name!r} rejects kwargs {dict(spec.kwargs)}: {message}"]
    return []


def check_task(spec: TaskSpec) -> list[str]:
    """reasoning-gym's problems with ``spec``'s dataset and kwargs, as messages; empty when usable
    (the spec's own fields were checked when it was made: :class:`harness.settings.schema.TaskSpec`).

    Builds the dataset with ``size=1`` and generates one item, so it is cheap; reasoning-gym generates
    procedurally and nothing here downloads. Memoised on disk per reasoning-gym version.
    """
    from harness import verdicts

    key = {**verdicts.versions("reasoning-gym"), "name": spec.name, "kwargs": dict(spec.kwargs)}
    return list(
        verdicts.memo(
            "reasoning-gym-dataset",
            key,
            lambda: _dataset_problems(spec),
            lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
        )
    )


def generate_entries(spec: TaskSpec, gen_seed: int, size: int) -> tuple[Any, list[dict]]:
    """Create the reasoning-gym dataset with generator seed ``gen_seed`` and return it and its ``size`` items.

    Raises:
        ValueError: the spec fails :func:`check_task`.
    """
    problems = check_task(spec)
    if problems:
        raise ValueError("invalid task spec: " + "; ".join(problems))
    import reasoning_gym

    ds = reasoning_gym.create_dataset(spec.name, seed=gen_seed, size=size, **dict(spec.kwargs))
    return ds, [ds[i] for i in range(size)]


def _entry_json(entry: Mapping[str, Any]) -> str:
    # Metadata may hold tuples or other non-JSON values; str() keeps the row storable, and scoring only
    # needs the fields the dataset reads back.
    return json.dumps(entry, default=str)


def build_task(spec: TaskSpec, seed: int, tokenizer: Any = None) -> Task:
    """Build the training split (generator seed ``seed``) and the fixed eval split (the reward
    functions TRL gets are :func:`harness.rewards.reward_funcs` of the task).

    Args:
        spec: the task.
        seed: generator seed of the training split, ``0 <= seed`` and ``seed + spec.train_size <= SFT_SEED_BASE``.
        tokenizer: only used to resolve ``template="auto"`` (chat iff it has a chat template).

    Raises:
        ValueError: invalid spec, or a seed whose training items could collide with reserved seeds.
    """
    if seed < 0 or seed + spec.train_size > SFT_SEED_BASE:
        raise ValueError(f"seed must be in [0, {SFT_SEED_BASE - spec.train_size}], got {seed}")
    template = resolve_template(spec.template, tokenizer)
    make_prompt = {"bare": bare_prompt, "steps": steps_prompt, "chat": chat_prompt}[template]
    dataset, train_entries = generate_entries(spec, seed, spec.train_size)
    _, eval_entries = generate_entries(spec, EVAL_SEED, spec.eval_size)
    import datasets

    train_dataset = datasets.Dataset.from_dict(
        {
            "prompt": [make_prompt(e) for e in train_entries],
            "entry": [_entry_json(e) for e in train_entries],
        }
    )
    train_questions = {e["question"] for e in train_entries}
    overlap = sum(e["question"] in train_questions for e in eval_entries) / max(len(eval_entries), 1)
    task = Task(
        spec=spec,
        seed=seed,
        template=template,
        dataset=dataset,
        train_dataset=train_dataset,
        eval_prompts=[make_prompt(e) for e in eval_entries],
        eval_entries=eval_entries,
        eval_overlap=overlap,
    )
    return task


# --------------------------------------------------------------------------------------------------
# Evaluation


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a completion: the tokenizer's eos first, then the other eos ids of the model's
    generation config (a chat model's end-of-turn token, e.g. Llama 3's ``<|eot_id|>`` beside its
    ``<|end_of_text|>``), as ``trl.GRPOTrainer`` gathers them.

    Raises:
        ValueError: neither names an eos token.
    """
    declared = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if declared is None:
        declared = []
    elif isinstance(declared, int):
        declared = [declared]
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    ids += [i for i in declared if i not in ids]
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation config names an eos token")
    return ids


def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    max_new_tokens: int,
    batch_size: int = 64,
    add_special_tokens: bool = True,
) -> list[str]:
    """Greedy completions of text prompts, special tokens stripped, one str per prompt.

    Prompts are left-padded in batches of ``batch_size``; generation stops at any of :func:`eos_token_ids`
    (the tokenizer's eos and every eos id of the model's generation config, as TRL's sampling stops).
    Tokenize as TRL does: plain prompts with ``add_special_tokens=True``, chat-templated text with False
    (the template already wrote them). The model must be in eval mode (dropout off) for the result to be
    deterministic.
    """
    from transformers import GenerationConfig

    eos = eos_token_ids(model, tokenizer)
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0],
        eos_token_id=eos if len(eos) > 1 else eos[0],
    )
    return _generate(model, tokenizer, prompts, config, batch_size, add_special_tokens)


def _generate(
    model: Any, tokenizer: Any, prompts: list[str], config: Any, batch_size: int, add_special_tokens: bool
) -> list[str]:
    """``model.generate`` over ``prompts`` in left-padded batches of ``batch_size`` prompts: the
    decoded new tokens (special tokens stripped), ``config.num_return_sequences`` per prompt in a
    row, prompt by prompt."""
    import torch  # here, not at module level: validating a grid imports this module

    device = next(model.parameters()).device
    out: list[str] = []
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            batch = prompts[start : start + batch_size]
            enc = tokenizer(
                batch,
                return_tensors="pt",
                padding=True,
                padding_side="left",
                add_special_tokens=add_special_tokens,
            )
            enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
            generated = model.generate(**enc, generation_config=config)
            new_tokens = generated[:, enc["input_ids"].shape[1] :]
            out.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return out


def sample_completions(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    n: int,
    temperature: float,
    max_new_tokens: int,
    batch_size: int = 64,
    add_special_tokens: bool = True,
) -> list[list[str]]:
    """``n`` sampled completions of each text prompt at ``temperature``, special tokens stripped.

    Sampling from the model's softmax at ``temperature`` alone: top_p 1, top_k 0 (off), min_p 0,
    typical_p 1, no repetition penalty, whatever the model's generation config says. Stops at
    :func:`eos_token_ids` and after ``max_new_tokens`` tokens, tokenized as
    :func:`generate_completions` does. Draws from torch's global RNG (``torch.manual_seed`` first to
    reproduce; :func:`sampled_eval` seeds and restores it). About ``batch_size`` sequences per
    ``generate`` call (``batch_size // n`` prompts, at least one). The model must be in eval mode.

    Returns:
        ``len(prompts)`` lists of ``n`` strings (shape ``(P, n)``).

    Raises:
        ValueError: ``n < 1`` or a ``temperature`` that is not a finite number > 0.
    """
    from transformers import GenerationConfig

    if n < 1:
        raise ValueError(f"n must be >= 1 samples per prompt, got {n}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    eos = eos_token_ids(model, tokenizer)
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        num_return_sequences=n,
        temperature=float(temperature),
        top_p=1.0,
        top_k=0,
        min_p=0.0,  # set, not None: None would take the model's generation config's value
        typical_p=1.0,
        epsilon_cutoff=0.0,
        eta_cutoff=0.0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0],
        eos_token_id=eos if len(eos) > 1 else eos[0],
    )
    flat = _generate(model, tokenizer, prompts, config, max(1, batch_size // n), add_special_tokens)
    return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]


def greedy_accuracy(
    model: Any, tokenizer: Any, task: Task, max_new_tokens: int, batch_size: int = 64
) -> float:
    """Mean :meth:`Task.score` over ``task.eval_prompts`` with greedy decoding; in [0, 1].

    Args:
        model: a causal LM (unwrapped, not the accelerate-prepared module); put in eval mode for the
            duration and left in the mode it was in.
        tokenizer: its tokenizer (with a chat template when ``task.template == "chat"``).
        task: the task whose held-out split is scored.
        max_new_tokens: generation budget per prompt, in tokens.
        batch_size: prompts per ``generate`` call.

    Raises:
        ValueError: chat task with a tokenizer lacking a chat template.
    """
    texts = [task.prompt_text(p, tokenizer) for p in task.eval_prompts]
    was_training = model.training
    model.eval()
    try:
        completions = generate_completions(
            model, tokenizer, texts, max_new_tokens, batch_size, add_special_tokens=task.template != "chat"
        )
    finally:
        model.train(was_training)
    scores = [task.score(c, e) for c, e in zip(completions, task.eval_entries, strict=True)]
    return sum(scores) / max(len(scores), 1)


@dataclass(frozen=True)
class SampledEval:
    """What :func:`sampled_eval` measured: ``n`` samples of each of the first ``P`` eval prompts.

    Attributes:
        step: the optimizer step it evaluated after (0: the starting policy), one of its seed's parts.
        n: samples per prompt.
        temperature: the sampling temperature.
        prompts: the ``P`` prompts, as in :attr:`Task.eval_prompts` (their indices there are 0..P-1).
        completions: shape ``(P, n)``: the sampled texts, special tokens stripped.
        scores: shape ``(P, n)``: each completion's :meth:`Task.score`, in [0, 1].
        pass_at: ``{k: mean over prompts of the unbiased pass@k}`` for ``k`` in
            :func:`harness.models.passk.ks_for` ``(n)``; a sample is correct when it scores 1.
        accuracy: mean score over all ``P * n`` samples, in [0, 1].
        seconds: wall time of generating and scoring.
    """

    step: int
    n: int
    temperature: float
    prompts: list
    completions: list[list[str]]
    scores: list[list[float]]
    pass_at: dict[int, float] = field(default_factory=dict)
    accuracy: float = 0.0
    seconds: float = 0.0


def eval_sampling_seed(seed: int, step: int) -> int:
    """The torch seed of the sampled eval after optimizer ``step`` (0: before the first) of a run of
    ``seed``: numpy's ``SeedSequence((seed, step))``'s first 32-bit word, so that a resumed run draws
    the eval samples an uninterrupted one drew, and each step draws afresh."""
    import numpy as np

    return int(np.random.SeedSequence((int(seed), int(step))).generate_state(1)[0])


def sampled_eval(
    model: Any,
    tokenizer: Any,
    task: Task,
    n: int,
    temperature: float,
    max_new_tokens: int,
    prompts: int | None = None,
    seed: int = 0,
    step: int = 0,
    batch_size: int = 64,
) -> SampledEval:
    """``n`` samples of each of the first ``prompts`` eval prompts at ``temperature``, scored, with
    their pass@k (:mod:`harness.models.passk`) and mean score.

    Torch's RNG (the CPU's and every CUDA device's) is forked around it and seeded with
    :func:`eval_sampling_seed` ``(seed, step)``: the same model, settings, seed and step draw the
    same samples, and whatever draws from torch's RNG next (training) draws what it would without
    this call.

    Args:
        model: a causal LM (unwrapped); put in eval mode for the duration and left in the mode it was in.
        tokenizer: its tokenizer (with a chat template when ``task.template == "chat"``).
        task: the task whose held-out split is sampled.
        n: samples per prompt, >= 1.
        temperature: sampling temperature, a finite number > 0 (:func:`sample_completions`).
        max_new_tokens: generation budget per sample, in tokens.
        prompts: how many of ``task.eval_prompts`` (the first ones); None = all.
        seed: the run's seed.
        step: the optimizer step evaluated after (0 = the starting policy).
        batch_size: sequences per ``generate`` call, about.

    Raises:
        ValueError: ``n < 1``, a bad temperature, ``prompts`` outside ``[1, len(task.eval_prompts)]``,
            a chat task with a tokenizer lacking a chat template.
    """
    import torch

    from harness.models import passk

    count = len(task.eval_prompts) if prompts is None else prompts
    if not 1 <= count <= len(task.eval_prompts):
        raise ValueError(f"prompts must lie in [1, {len(task.eval_prompts)}] (the eval split), got {prompts}")
    chosen = task.eval_prompts[:count]
    texts = [task.prompt_text(p, tokenizer) for p in chosen]
    t0 = time.perf_counter()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    devices = list(range(torch.cuda.device_count())) if cuda else []
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(eval_sampling_seed(seed, step))
            completions = sample_completions(
                model, tokenizer, texts, n, temperature, max_new_tokens, batch_size, task.template != "chat"
            )
    finally:
        model.train(was_training)
    scores = [
        [task.score(c, entry) for c in row]
        for row, entry in zip(completions, task.eval_entries[:count], strict=True)
    ]
    pass_at, accuracy = passk.summarise(scores)
    return SampledEval(
        step=step,
        n=n,
        temperature=float(temperature),
        prompts=list(chosen),
        completions=completions,
        scores=scores,
        pass_at=pass_at,
        accuracy=accuracy,
        seconds=time.perf_counter() - t0,
    )
