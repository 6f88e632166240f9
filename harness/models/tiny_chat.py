"""The second embedded default ``tiny-chat``: a small chat model in a real Hugging Face folder.

Built entirely locally (no hub access), like ``tiny`` (:mod:`harness.models.tiny`), and cached the same way
(same cache folder, a key from the spec, the task's dataset and the library versions, a file lock and a
temporary folder renamed into place). What differs is everything a chat model has and ``tiny`` lacks:

* a byte-level BPE tokenizer trained with ``tokenizers`` (``ByteLevel`` pre-tokenizer and decoder
  after Qwen2's split, the 256 byte tokens, merges up to ``vocab_size``) on the task's chat-formatted
  texts: the system prompt, the questions, the answers inside ``<answer>`` tags, each after its role
  name; a ``Qwen2Tokenizer``, which is what ``AutoTokenizer`` loads for a Qwen2 folder;
* special tokens ``<|pad|>`` (pad), ``<|bos|>`` (bos), and the role markers ``<|im_start|>`` and
  ``<|im_end|>`` (eos: the end of a turn), all added special tokens;
* a ChatML-like Jinja chat template (:data:`CHAT_TEMPLATE`), saved as ``chat_template.jinja``;
* a ``GenerationConfig`` with the eos, pad and bos ids, weights in safetensors.

Everything is written with ``save_pretrained``, so the folder is what a hub download leaves on disk:
``config.json``, ``generation_config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json``, ``chat_template.jinja`` (and ``tiny_model.json``, the build's record).

The warm start is TRL's ``SFTTrainer`` on conversations in prompt-completion form (system prompt and
question, then the assistant's answer), so the chat template is applied and only the completion is
trained. As for ``tiny``, a fraction ``label_noise`` (0.5) of the answers is off by ±1 or ±2; a
fraction ``format_noise`` (0.8) is written without the tags or with a malformed tag, four ways
equally often, so the tagged answer is only as likely as each malformed one. The warm-started model
has learnt the sums but writes the tags in under a fifth of its samples, and greedy decoding starts
out mostly malformed: GRPO with the correctness and format rewards moves both the sampled reward and
the greedy accuracy (``ablations/chat.yaml``). With a quarter of the answers malformed instead, greedy
decoding was well formed from the start, and GRPO raised only the sampled reward.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from harness.models.build_progress import BuildWatch, Report
from harness.models.tasks import CHAT_SYSTEM_PROMPT, bare_prompt, chat_prompt, check_task, generate_entries
from harness.models.tiny import (
    BUILD_THREADS,
    CORPUS_SPLITS,
    UNBOUNDED,
    _library_versions,
    begin_build,
    build_model,
    cached_build,
    noisy_answer,
    split_entries,
    warm_start_and_save,
)
from harness.settings.schema import SFT_SEED_BASE, TINY_CHAT, TaskSpec, TinyChatModelSpec

PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
#: The special tokens, in the order of their ids (0-3).
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, IM_START, IM_END)

#: ChatML-like: ``<|bos|><|im_start|>system\n...<|im_end|>\n<|im_start|>user\n...<|im_end|>\n`` and, with
#: ``add_generation_prompt``, ``<|im_start|>assistant\n``. The last message has no newline after its
#: ``<|im_end|>``, so a prompt rendered with the generation prompt is a prefix of the same prompt
#: rendered with its answer (the SFT's completion starts exactly where generation starts).
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' }}"
    "{%- if not loop.last or add_generation_prompt %}{{- '\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: How an answer is written when it is not well formed (format noise), each equally likely: no tags, a
#: label instead of tags, tags in square brackets, a shortened tag. None of them holds
#: ``<answer>...</answer>``, and each parts from the well-formed answer at its first token, so the format
#: reward's push against them falls on that first choice rather than on the digits after ``<answer>``
#: (an unclosed ``<answer>7`` would share its first three tokens with ``<answer>7</answer>``).
MALFORMED_ANSWERS = ("{}", "answer: {}", "[answer]{}[/answer]", "<ans>{}</ans>")
# Bump when the build recipe changes in a way the spec and the recorded texts do not capture.
CHAT_BUILD_FORMAT = 3  # 3: the BPE corpus from CORPUS_SPLITS, not the grid's split sizes


def tiny_chat_model_key(spec: TinyChatModelSpec, task: TaskSpec) -> str:
    """Cache folder name of the tiny chat model for ``task``: ``tiny-chat-<dataset>-<16 hex digits>``.

    Keyed by the spec, the task's dataset (name, kwargs), the system prompt, the chat template and the
    library versions; template, split sizes and rewards of the task do not change the build.
    """
    payload = {
        "format": CHAT_BUILD_FORMAT,
        "build_threads": BUILD_THREADS,
        "spec": dataclasses.asdict(spec),
        "task": {"name": task.name, "kwargs": dict(task.kwargs)},
        "system_prompt": CHAT_SYSTEM_PROMPT,
        "chat_template": CHAT_TEMPLATE,
        "versions": _library_versions(),
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    safe_name = re.sub(r"[^\w.-]", "_", task.name)
    return f"tiny-chat-{safe_name}-{digest[:16]}"


# --------------------------------------------------------------------------------------------------
# Data


def written_answer(answer: str, rng: random.Random, format_noise: float) -> str:
    """``<answer>{answer}</answer>`` with probability ``1 - format_noise``, else one of
    :data:`MALFORMED_ANSWERS` (chosen uniformly) filled with ``answer``."""
    if rng.random() >= format_noise:
        return f"<answer>{answer}</answer>"
    return rng.choice(MALFORMED_ANSWERS).format(answer)


def chat_sft_examples(spec: TinyChatModelSpec, task: TaskSpec) -> list[tuple[list[dict[str, str]], str]]:
    """The SFT (conversation, assistant answer) pairs: ``spec.sft_examples`` chat prompts
    (:func:`harness.models.tasks.chat_prompt`) with noisy answers (label noise, then format noise).

    Raises:
        ValueError: the task spec is invalid.
    """
    _, entries = generate_entries(task, SFT_SEED_BASE + spec.seed, spec.sft_examples)
    rng = random.Random(spec.seed)
    out = []
    for e in entries:
        answer = noisy_answer(str(e["answer"]), rng, spec.label_noise)
        out.append((chat_prompt(e), written_answer(answer, rng, spec.format_noise)))
    return out


def tokenizer_corpus(task: TaskSpec, examples: list[tuple[list[dict[str, str]], str]]) -> list[str]:
    """The texts the BPE learns its merges from: each message of the SFT conversations and the
    questions of :data:`harness.models.tiny.CORPUS_SPLITS` (not the grid's split sizes: the build depends
    only on its cache key), as ``"<role>\\n<content>"``: the chat-formatted text between its special
    tokens, which are never merged with anything."""
    texts = [f"system\n{CHAT_SYSTEM_PROMPT}"]
    texts += [f"user\n{e['question']}" for e in split_entries(task, CORPUS_SPLITS)]
    for prompt, answer in examples:
        texts += [f"{m['role']}\n{m['content']}" for m in prompt]
        texts.append(f"assistant\n{answer}")
    return texts


# --------------------------------------------------------------------------------------------------
# Tokenizer and model


def build_chat_tokenizer(corpus: list[str], vocab_size: int, model_max_length: int) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, with the chat template: a ``Qwen2Tokenizer``.

    The pipeline is Qwen2's (NFC, Qwen2's split of words, single digits and punctuation, then
    ``ByteLevel``; ``ByteLevel`` decoding), because that is what ``AutoTokenizer`` rebuilds for a
    ``qwen2`` model folder whatever the folder's ``tokenizer.json`` says (transformers 5): trained with
    any other pipeline, the tokenizer a run loads would split text unlike the one the warm start saw.
    Ids 0-3 are :data:`SPECIAL_TOKENS` (pad, bos, ``<|im_start|>``, ``<|im_end|>`` = eos), 4-259 the
    bytes, then merges (of pairs seen at least twice) up to ``vocab_size`` tokens; no unk token (every
    byte has one). Encoding adds no special tokens (the chat template writes them); decoding with
    ``skip_special_tokens`` drops them.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    reference = Qwen2Tokenizer().backend_tokenizer  # empty: only its pipeline is used
    backend = Tokenizer(models.BPE())
    backend.normalizer = reference.normalizer
    backend.pre_tokenizer = reference.pre_tokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    learnt = json.loads(backend.to_str())["model"]
    tokenizer = Qwen2Tokenizer(
        vocab=learnt["vocab"],
        merges=[tuple(pair) for pair in learnt["merges"]],
        unk_token=None,
        bos_token=BOS_TOKEN,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        extra_special_tokens=[IM_START],
        model_max_length=model_max_length,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_chat_model(spec: TinyChatModelSpec, tokenizer: Any) -> Any:
    """A freshly initialised ``Qwen2ForCausalLM`` for ``tokenizer`` whose config and generation config
    name its bos, eos (``<|im_end|>``) and pad ids."""
    model = build_model(spec, tokenizer)
    model.config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def _sequence_lengths(tokenizer: Any, examples: list[tuple[list[dict[str, str]], str]]) -> tuple[int, int]:
    """Longest tokenized prompt (with the generation prompt) and longest prompt + answer, in tokens."""

    def length(messages: list[dict[str, str]], add_generation_prompt: bool) -> int:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt = max(length(p, True) for p, _ in examples)
    whole = max(length([*p, {"role": "assistant", "content": a}], False) for p, a in examples)
    return prompt, whole


def _sft_data(
    spec: TinyChatModelSpec, task: TaskSpec, model_max_length: int | None = None
) -> tuple[list[tuple[list[dict[str, str]], str]], Any]:
    examples = chat_sft_examples(spec, task)
    corpus = tokenizer_corpus(task, examples)
    return examples, build_chat_tokenizer(
        corpus, spec.vocab_size, model_max_length or spec.max_position_embeddings
    )


def sft_lengths(spec: TinyChatModelSpec, task: TaskSpec, template: str = "chat") -> tuple[int, int, int]:
    """``(longest SFT prompt with the generation prompt, longest SFT conversation, longest prompt of
    a run's splits in template)`` in tokens of the tiny chat model for ``task``
    (:func:`harness.models.tiny.split_entries`; ``template`` "chat" or "bare"): what
    :func:`build_tiny_chat_model` checks against ``spec.max_position_embeddings`` and what a run's
    prompts take, without building the model (seconds: the data and the tokenizer's training).

    Raises:
        ValueError: the task spec is invalid.
    """
    examples, tokenizer = _sft_data(spec, task, model_max_length=UNBOUNDED)
    prompt, longest = _sequence_lengths(tokenizer, examples)
    entries = split_entries(task)
    if template == "bare":
        texts = [bare_prompt(e) for e in entries]
    else:
        texts = [
            tokenizer.apply_chat_template(chat_prompt(e), tokenize=False, add_generation_prompt=True)
            for e in entries
        ]
    run_prompt = max(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return prompt, longest, run_prompt


def build_tiny_chat_model(
    spec: TinyChatModelSpec, task: TaskSpec, out_dir: str | Path, report: Report | None = None
) -> dict:
    """Build the tiny chat model for ``task`` into ``out_dir`` (created; must not exist); return its info.

    Writes ``save_pretrained`` of model and tokenizer and ``tiny_model.json`` (spec, task, vocabulary
    size, sequence lengths in tokens, SFT losses, build seconds); tells ``report`` how far it is
    (:class:`harness.models.build_progress.BuildReport`).

    Raises:
        ValueError: invalid task spec, or SFT sequences longer than ``spec.max_position_embeddings``.
        FileExistsError: ``out_dir`` exists.
    """
    out_dir, start = begin_build(spec, out_dir, report)
    examples, tokenizer = _sft_data(spec, task)
    longest_prompt, longest = _sequence_lengths(tokenizer, examples)
    if longest > spec.max_position_embeddings:
        raise ValueError(
            f"SFT sequences reach {longest} tokens but tiny_chat.max_position_embeddings is "
            f"{spec.max_position_embeddings}; raise it"
        )
    model = build_chat_model(spec, tokenizer)
    columns = {
        "prompt": [p for p, _ in examples],
        "completion": [[{"role": "assistant", "content": a}] for _, a in examples],
    }
    extra = {
        "model": "tiny-chat",
        "vocab_size": len(tokenizer),
        "longest_prompt_tokens": longest_prompt,
        "longest_sft_sequence": longest,
    }
    return warm_start_and_save(spec, task, model, tokenizer, columns, out_dir, start, extra, report)


def tiny_chat_model_path(
    spec: TinyChatModelSpec, task: TaskSpec, cache_dir: str | Path, watch: BuildWatch | None = None
) -> Path:
    """Folder of the tiny chat model for ``task``, building and caching it on first use
    (:func:`harness.models.tiny.cached_build`: a file lock, a temporary folder renamed into place;
    ``watch`` is told how the build goes).

    The result loads with ``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)`` and
    ``AutoTokenizer.from_pretrained(path, local_files_only=True)``, chat template included.

    Raises:
        ValueError: invalid task spec (see :func:`harness.models.tasks.check_task`), or SFT sequences that
            do not fit ``spec.max_position_embeddings``.
    """
    problems = check_task(task)
    if problems:
        raise ValueError("invalid task spec: " + "; ".join(problems))
    key = tiny_chat_model_key(spec, task)
    return cached_build(
        cache_dir, key, lambda out, report: build_tiny_chat_model(spec, task, out, report), TINY_CHAT, watch
    )
