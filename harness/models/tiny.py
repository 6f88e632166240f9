"""The default model ``tiny``: a small Qwen2 with a character-level tokenizer, warm-started by SFT.

Built entirely locally (no hub access): the tokenizer's vocabulary is the set of characters in the task's
bare prompts and answers, the architecture is a ``transformers.Qwen2Config`` and the warm start is TRL's
``SFTTrainer`` on prompt/answer pairs from reasoning-gym. A fraction ``label_noise`` of the SFT answers
is deliberately off by ±1 or ±2, so the warm-started policy puts part of its mass on the right answer
and part on near misses: the regime where reward-driven RL (GRPO) measurably sharpens a policy within a
few hundred CPU steps. Warm-started on clean labels (2-digit sums), GRPO at CPU budgets either collapsed
the policy or moved the reward only within the spread across seeds.

The result is cached under ``cache_dir/<key>/`` (``save_pretrained`` of model and tokenizer plus
``tiny_model.json`` describing the build), keyed by a hash of the model spec, the task's dataset and the
versions of the libraries that shape the weights.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from harness.models import prebuilt
from harness.models.build_progress import (
    BUILD_LOG_EVERY_S,
    DATA,
    SAVE,
    SFT,
    WAIT_POLL_S,
    BuildProgress,
    BuildReport,
    BuildWatch,
    Report,
    build_progress_path,
    build_text,
    clock,
    read_build_progress,
    say,
)
from harness.models.tasks import bare_prompt, check_task, generate_entries
from harness.settings.schema import (
    EVAL_SEED,
    SFT_SEED_BASE,
    TINY,
    TaskSpec,
    TinyModelSpec,
)

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
INFO_FILE = "tiny_model.json"
# Bump when the build recipe changes in a way the spec does not capture, so old caches are not reused.
# 2: byte-level symbols, so AutoTokenizer's Qwen2Tokenizer keeps spaces; 3: the alphabet from
# CORPUS_SPLITS, not the grid's split sizes (which are not in the cache key)
BUILD_FORMAT = 3
#: ``(generator seed, items)`` of the task items whose characters make the tiny model's alphabet and
#: whose questions train the tiny chat model's BPE: the first 2,000 of the training split of seed 0
#: and the eval split's first 200 (the smoke grid's sizes). Fixed, so that a build depends only on
#: its cache key; a run's split sizes are not in it.
CORPUS_SPLITS = ((0, 2000), (EVAL_SEED, 200))


logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Cache key


def _library_versions() -> dict[str, str]:
    from importlib.metadata import version

    import tokenizers
    import torch
    import transformers
    import trl

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "tokenizers": tokenizers.__version__,
        "reasoning_gym": version("reasoning-gym"),  # the module's __version__ lags its releases
    }


def tiny_model_key(spec: TinyModelSpec, task: TaskSpec) -> str:
    """Cache folder name of the tiny model for ``task``: ``tiny-<dataset>-<16 hex digits>``.

    Only the task's dataset (name, kwargs) enters the key: template, split sizes and rewards do not
    change the warm start.
    """
    payload = {
        "format": BUILD_FORMAT,
        "build_threads": BUILD_THREADS,
        "spec": dataclasses.asdict(spec),
        "task": {"name": task.name, "kwargs": dict(task.kwargs)},
        "versions": _library_versions(),
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
    safe_name = re.sub(r"[^\w.-]", "_", task.name)
    return f"tiny-{safe_name}-{digest[:16]}"


# --------------------------------------------------------------------------------------------------
# Data, tokenizer, model


def noisy_answer(answer: str, rng: random.Random, label_noise: float) -> str:
    """``answer`` with probability ``1 - label_noise``, else (integers only) answer ± 1 or ± 2."""
    if rng.random() >= label_noise:
        return answer
    try:
        value = int(answer)
    except ValueError:
        return answer
    return str(value + rng.choice((-2, -1, 1, 2)))


def sft_pairs(spec: TinyModelSpec, task: TaskSpec) -> list[tuple[str, str]]:
    """The SFT (prompt, answer) pairs: ``spec.sft_examples`` bare prompts with noisy answers (no eos).

    Raises:
        ValueError: the task spec is invalid.
    """
    _, entries = generate_entries(task, SFT_SEED_BASE + spec.seed, spec.sft_examples)
    rng = random.Random(spec.seed)
    return [(bare_prompt(e), noisy_answer(str(e["answer"]), rng, spec.label_noise)) for e in entries]


def task_alphabet(task: TaskSpec, extra_texts: Iterable[str] = ()) -> list[str]:
    """Sorted characters of the task's bare prompts and answers (the items of :data:`CORPUS_SPLITS`).

    Characters outside it (e.g. a training seed that draws an unseen symbol) map to the unk token.
    """
    chars: set[str] = set()
    for e in split_entries(task, CORPUS_SPLITS):
        chars.update(bare_prompt(e))
        chars.update(str(e["answer"]))
    for text in extra_texts:
        chars.update(text)
    return sorted(chars)


def build_tokenizer(alphabet: list[str], model_max_length: int) -> Any:
    """Character-level ``PreTrainedTokenizerFast``: ids 0-2 are pad, eos, unk, then one id per byte of
    the alphabet's characters, written as GPT-2's byte-level symbols (a space is ``Ġ``).

    Byte-level symbols because the folder is a Qwen2 one: transformers 5's ``AutoTokenizer`` loads it
    as a ``Qwen2Tokenizer``, which maps text to those symbols before looking tokens up (with no merges,
    one token per symbol). Built this way, the tokenizer the warm start trains with and the one every
    run loads give the same ids (a plain character vocabulary lost every space on loading). Decoding
    concatenates characters; no special tokens are added on encoding, so the eos token only appears
    where a completion ends.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbol = bytes_to_unicode()
    vocab = {PAD_TOKEN: 0, EOS_TOKEN: 1, UNK_TOKEN: 2}
    for ch in alphabet:
        for byte in ch.encode("utf-8"):
            vocab.setdefault(symbol[byte], len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated"),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
    )


def build_model(spec: TinyModelSpec, tokenizer: Any) -> Any:
    """A freshly initialised ``Qwen2ForCausalLM`` (float32, tied embeddings) for ``tokenizer``'s vocabulary."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def run_sft(
    spec: TinyModelSpec,
    model: Any,
    tokenizer: Any,
    columns: dict[str, list],
    work_dir: Path,
    report: Report | None = None,
) -> dict:
    """The warm start: TRL ``SFTTrainer`` on ``columns`` (``prompt`` and ``completion``, plain text or
    conversations), loss on completion tokens only, cosine schedule, on the CPU; trains ``model`` in place.

    ``report`` (a :class:`BuildReport`) is told of every SFT step (``report(SFT, step, sft_steps)``);
    it may raise to stop the build, and changes nothing of what is trained.

    Returns ``{"train_loss", "final_logged_loss"}`` (mean cross-entropy per completion token, nats).
    """
    import datasets
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    train = datasets.Dataset.from_dict(columns)
    args = SFTConfig(
        output_dir=str(work_dir),
        max_steps=spec.sft_steps,
        per_device_train_batch_size=spec.sft_batch_size,
        learning_rate=spec.sft_lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, spec.sft_steps // 20),
        weight_decay=0.0,
        completion_only_loss=True,
        max_length=spec.max_position_embeddings,
        gradient_checkpointing=False,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=max(1, spec.sft_steps // 10),
        disable_tqdm=True,
        seed=spec.seed,
        data_seed=spec.seed,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    # A library build should not print a dict per logging step; the losses go into tiny_model.json instead.
    trainer.remove_callback(PrinterCallback)
    if report is not None:
        trainer.add_callback(_sft_progress(report, spec.sft_steps))
        report(SFT, 0, spec.sft_steps)
    result = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"train_loss": result.training_loss, "final_logged_loss": losses[-1] if losses else None}


def _sft_progress(report: Report, max_steps: int) -> Any:
    """A ``TrainerCallback`` that tells ``report`` of each SFT step (reads nothing, changes nothing)."""
    from transformers import TrainerCallback

    class SftProgress(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            report(SFT, state.global_step, max_steps)

    return SftProgress()


#: A tokenizer length limit no sequence reaches: counting tokens past a short context, unwarned.
UNBOUNDED = 1 << 30


def _sft_data(
    spec: TinyModelSpec, task: TaskSpec, model_max_length: int | None = None
) -> tuple[list[tuple[str, str]], list[str], Any, int, int]:
    """The warm start's pairs, alphabet and tokenizer (``model_max_length``: the tokenizer's, by
    default the model's context), its longest prompt and its longest prompt + answer + eos, in tokens."""
    pairs = sft_pairs(spec, task)
    alphabet = task_alphabet(task, extra_texts=[p + a for p, a in pairs])
    tokenizer = build_tokenizer(alphabet, model_max_length or spec.max_position_embeddings)
    prompt = max(len(tokenizer(p)["input_ids"]) for p, _ in pairs)
    longest = max(len(tokenizer(p + a)["input_ids"]) + 1 for p, a in pairs)
    return pairs, alphabet, tokenizer, prompt, longest


def split_entries(task: TaskSpec, splits: Iterable[tuple[int, int]] | None = None) -> list[dict]:
    """The items of ``splits`` (``(generator seed, items)`` pairs); by default those a run's prompts
    come from: the training split of generator seed 0 (``train_size`` items; other seeds draw other
    items of the same kind) and the eval split."""
    splits = ((0, task.train_size), (EVAL_SEED, task.eval_size)) if splits is None else splits
    return [e for gen_seed, size in splits for e in generate_entries(task, gen_seed, size)[1]]


def sft_lengths(
    spec: TinyModelSpec,
    task: TaskSpec,
    sft_data: Callable[..., tuple] | None = None,
    prompt_of: Callable[[dict], str] = bare_prompt,
) -> tuple[int, int, int]:
    """``(longest SFT prompt, longest SFT prompt + answer + eos, longest prompt of a run's splits)``
    in tokens of the tiny model for ``task`` (:func:`split_entries`, bare prompts): what
    :func:`build_tiny_model` checks against ``spec.max_position_embeddings`` and what a run's
    prompts take, without building anything (about a second: the data and the tokenizer).

    ``sft_data`` and ``prompt_of`` give another character-level model's warm-start data (its
    ``_sft_data``, same signature and returns) and prompts (``harness.models.tiny_steps``).

    Raises:
        ValueError: the task spec is invalid.
    """
    _, _, tokenizer, prompt, longest = (sft_data or _sft_data)(spec, task, model_max_length=UNBOUNDED)
    run_prompt = max(len(tokenizer(prompt_of(e))["input_ids"]) for e in split_entries(task))
    return prompt, longest, run_prompt


BUILD_THREADS = 2
"""Torch intra-op threads of every embedded model build, whatever the cores.

The thread count changes the weights: the intra-op split reorders the reductions of the warm start's
kernels, so builds of one spec on 1, 2, 3 and 4 threads differ bit for bit. A fixed count makes the
weights a function of the cache key (which holds it) on a given CPU and library versions. Two threads
on one core cost about 4% (a 40-step ``tiny-steps`` build under ``taskset -c 0``: 11.6 s on one
thread, 12.1 s on two); on two cores they take 0.64 of one thread's time (``benchmarks/build_threads.py``).
"""


@contextlib.contextmanager
def build_threads() -> Iterator[int]:
    """Torch threads set to :data:`BUILD_THREADS` for a model build, then put back; yields the count.

    A build runs inside the first run that needs the model, whose threads are its share of the cores
    (``threads_per_run``), while the runs waiting for the same model sit idle on its lock; the build's
    count is fixed rather than taken from the cores so that the weights do not depend on the machine
    (``tests/test_tiny_steps.py`` checks a build on one core against one on every core).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        yield BUILD_THREADS
    finally:
        torch.set_num_threads(before)


def begin_build(spec: TinyModelSpec, out_dir: str | Path, report: Report | None = None) -> tuple[Path, float]:
    """The start of an embedded model's build: ``out_dir`` created (it must not exist), the clock
    started (``time.perf_counter()``, for the build info's seconds) and every RNG seeded with
    ``spec.seed``, in that order; ``report`` told that the SFT examples are being generated.
    Returns ``(out_dir, start)``.

    Raises:
        FileExistsError: ``out_dir`` exists.
    """
    from transformers import set_seed

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True)
    start = time.perf_counter()
    set_seed(spec.seed)
    if report is not None:
        report(DATA, examples=spec.sft_examples)
    return out_dir, start


def build_tiny_model(
    spec: TinyModelSpec, task: TaskSpec, out_dir: str | Path, report: Report | None = None
) -> dict:
    """Build the tiny model for ``task`` into ``out_dir`` (created; must not exist) and return its build info.

    Writes ``save_pretrained`` of model and tokenizer and ``tiny_model.json`` (spec, task, alphabet,
    SFT losses, build seconds). Takes about ``sft_steps / 10`` seconds on one CPU thread at the defaults.
    ``report`` (a :class:`BuildReport`) is told how far the build is.

    Raises:
        ValueError: invalid task spec.
        FileExistsError: ``out_dir`` exists.
    """
    out_dir, start = begin_build(spec, out_dir, report)
    pairs, alphabet, tokenizer, _, longest = _sft_data(spec, task)
    if longest > spec.max_position_embeddings:
        raise ValueError(
            f"SFT sequences reach {longest} tokens but max_position_embeddings is {spec.max_position_embeddings}"
        )
    model = build_model(spec, tokenizer)
    columns = {"prompt": [p for p, _ in pairs], "completion": [a for _, a in pairs]}
    extra = {"alphabet": alphabet, "longest_sft_sequence": longest}
    return warm_start_and_save(spec, task, model, tokenizer, columns, out_dir, start, extra, report)


def warm_start_and_save(
    spec: TinyModelSpec,
    task: TaskSpec,
    model: Any,
    tokenizer: Any,
    columns: dict[str, list],
    out_dir: Path,
    start: float,
    extra: dict[str, Any],
    report: Report | None = None,
) -> dict:
    """The end of an embedded model's build: :func:`run_sft` on ``columns``, ``save_pretrained`` of
    model and tokenizer into ``out_dir``, and ``tiny_model.json`` (spec, task, parameter count, SFT
    losses, versions, seconds since ``start`` (``time.perf_counter()``), plus ``extra``). Returns
    that info. ``report`` is told of each SFT step, then of the save."""
    with tempfile.TemporaryDirectory(prefix="sft-") as work, build_threads() as threads:
        sft_info = run_sft(spec, model, tokenizer, columns, Path(work), report)
    if report is not None:
        report(SAVE)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    info = {
        "spec": dataclasses.asdict(spec),
        "task": {"name": task.name, "kwargs": dict(task.kwargs)},
        "num_parameters": sum(p.numel() for p in model.parameters()),
        **extra,
        "sft": sft_info,
        "sft_threads": threads,
        "versions": _library_versions(),
        "build_seconds": round(time.perf_counter() - start, 2),
    }
    (out_dir / INFO_FILE).write_text(json.dumps(info, indent=2, default=str))
    return info


def cached_build(
    cache_dir: str | Path,
    key: str,
    build: Callable[[Path, Report], dict],
    name: str | None = None,
    watch: BuildWatch | None = None,
) -> Path:
    """``cache_dir/key``, made by ``build(folder, report)`` on first use (``build`` returns the build
    info and tells ``report``, a :class:`BuildReport`, how far it is), or copied from the folder
    shipped for ``key`` where there is one (:mod:`harness.models.prebuilt`; it is what the build
    would write on the machine that made it).

    Safe under concurrency: processes serialise on a file lock next to the folder, and a build goes into a
    temporary sibling that is renamed into place only when complete, so a folder that exists is whole.
    While it builds, the build's progress file beside the lock (:func:`build_progress_path`) says how
    far it is; a process that waits on the lock reads it. Both the building and the waiting process
    tell ``watch`` (its ``on_progress``, about every :data:`BUILD_PROGRESS_EVERY_S` seconds) and say
    it on stderr every :data:`BUILD_LOG_EVERY_S` seconds. ``watch.on_progress`` may raise to stop
    the build or the wait: the temporary folder and the progress file are removed, the lock released.
    ``name`` is the model's name in those words (default ``key``).
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / key
    if final.is_dir():
        return final
    name, watch = name or key, watch or BuildWatch()
    progress = build_progress_path(cache_dir, key)
    lock = FileLock(str(cache_dir / f"{key}.lock"))
    _acquire(lock, progress, name, watch)
    try:
        if final.is_dir():  # another process built it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache_dir))
        report = BuildReport(progress, name, watch)
        source = prebuilt.shipped(key)
        try:
            if source is not None:
                origin = prebuilt.install(source, tmp / "model")
            else:
                info = build(tmp / "model", report)
            os.rename(tmp / "model", final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            progress.unlink(missing_ok=True)
    finally:
        lock.release()
    if source is not None:
        cpu = origin.get("cpu", {})
        say(
            f"model {name}: installed the copy shipped with grpo-harness (built on {cpu.get('cpu', '?')}, "
            f"{cpu.get('capability', '?')}; {prebuilt.NO_PREBUILT_ENV}=1 builds it here instead): {final}"
        )
        return final
    say(f"built model {name} in {clock(time.time() - report.started_at)}: {final}")
    logger.info("built %s in %.1f s", final, info["build_seconds"])
    return final


def _acquire(lock: FileLock, progress: Path, name: str, watch: BuildWatch) -> None:
    """Take a build's ``lock``; while another process holds it (it builds the model), tell
    ``watch`` how that build goes (from its ``progress`` file) every :data:`WAIT_POLL_S` seconds,
    and say it on stderr every :data:`BUILD_LOG_EVERY_S` seconds."""
    try:
        lock.acquire(timeout=0)
        return
    except Timeout:
        pass
    since, logged = time.monotonic(), -math.inf
    while True:
        seen = read_build_progress(progress) or BuildProgress(model=name)
        seen = dataclasses.replace(seen, waiting=True)
        if time.monotonic() - logged >= BUILD_LOG_EVERY_S:
            logged = time.monotonic()
            say(f"{build_text(seen)} (waited {clock(logged - since)})")
        if watch.on_progress is not None:
            watch.on_progress(seen)
        try:
            lock.acquire(timeout=WAIT_POLL_S)
            return
        except Timeout:
            continue


def tiny_model_path(
    spec: TinyModelSpec, task: TaskSpec, cache_dir: str | Path, watch: BuildWatch | None = None
) -> Path:
    """Folder of the tiny model for ``task``, building and caching it on first use (:func:`cached_build`,
    which tells ``watch`` how the build goes).

    The result loads with ``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)`` and
    ``AutoTokenizer.from_pretrained(path, local_files_only=True)``.

    Raises:
        ValueError: invalid task spec (see :func:`harness.models.tasks.check_task`).
    """
    problems = check_task(task)
    if problems:
        raise ValueError("invalid task spec: " + "; ".join(problems))
    key = tiny_model_key(spec, task)
    return cached_build(
        cache_dir, key, lambda out, report: build_tiny_model(spec, task, out, report), TINY, watch
    )
