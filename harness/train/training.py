"""One run: build the task, the model and TRL's trainer, train (resuming from a checkpoint), record.

``train(spec, run_dir)`` is what every executor calls, in a fresh process (submitit local or SLURM)
or in-process (debug). It is idempotent: a run with a DONE marker returns at once; a run with
checkpoints resumes from the latest and drops metric rows logged after it, so every step ends up
in the parquet exactly once.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import layout, losses, rewards
from harness.config import lora
from harness.layout import atomic_write_json, read_metrics
from harness.settings.runs import RunSpec
from harness.settings.schema import ExecutorSettings, HarnessSettings
from harness.train import checkpoints, ending, trackers
from harness.train.ending import RunDiverged
from harness.train.metrics import MetricsWriter, provenance
from harness.train.phases import RunPhases, RunStopped
from harness.train.recorder import make_callback

MODEL_CACHE_ENV = "GRPO_HARNESS_CACHE"


class RunBusy(RuntimeError):
    """Another process is training this run right now (it holds the run's lock); nothing was changed."""


def model_cache_dir(grid_dir: Path) -> Path:
    """Where built models are cached: ``$GRPO_HARNESS_CACHE`` or ``<results root>/.cache/models``."""
    env = os.environ.get(MODEL_CACHE_ENV)
    return Path(env) if env else Path(grid_dir).resolve().parent / ".cache" / "models"


def prepare_model(spec: RunSpec, run_dir: str | Path, phases: RunPhases | None = None) -> str:
    """The run's model as a local path or hub id, building the tiny model into the cache if needed.

    Call it before setting up ``torch.distributed`` for a multi-process run: the tiny model's warm
    start is a single-process SFT, and the cache's file lock makes the other ranks wait for it.
    ``phases`` is told how the build goes, or the wait for another process's build (and stops
    either when a stop is asked for: :class:`harness.train.phases.RunStopped`).
    """
    from harness.models.names import resolve_model

    return resolve_model(
        spec.model,
        task=spec.task,
        cache_dir=model_cache_dir(Path(run_dir).parent.parent),
        tiny_spec=spec.tiny,
        watch=phases.watch(f"run {spec.run_id}") if phases is not None else None,
    )


def build_trainer(
    spec: RunSpec,
    model_path: str,
    config: Any,
    trainer_class: type | None = None,
    phases: RunPhases | None = None,
):
    """The run's tokenizer, task and TRL trainer, the one place a ``GRPOTrainer`` is made.

    Args:
        spec: the run (its task and seed).
        model_path: what :func:`prepare_model` returned (a folder or a hub id).
        config: the run's ``GRPOConfig`` (:func:`harness.trl_boundary.build_grpo_config`).
        trainer_class: ``GRPOTrainer`` or a subclass; default
            :class:`harness.train.trainer.HarnessGRPOTrainer`, which records w_seq.
        phases: told when the dataset is built and when the model loads.

    Returns:
        ``(trainer, task, tokenizer)``.
    """
    from transformers import AutoTokenizer

    from harness.models.tasks import build_task

    if trainer_class is None:
        from harness.train.trainer import HarnessGRPOTrainer as trainer_class
    t = spec.task
    if phases is not None:
        phases.enter(
            layout.PHASE_DATASET,
            f"building the dataset: {t.name}, {t.train_size} training and {t.eval_size} eval items",
        )
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=os.path.isdir(model_path))
    task = build_task(t, seed=spec.seed, tokenizer=tokenizer)
    if phases is not None:
        phases.enter(layout.PHASE_TRAINER, f"loading the model ({spec.model}) and building the trainer")
    peft = spec.settings.get(lora.SECTION)  # None: every weight trains
    modules = [str(m) for m in spec.settings.get(losses.PLUGINS_KEY) or []]
    trainer = trainer_class(
        model=model_path,
        reward_funcs=rewards.reward_funcs(task, config.max_completion_length, modules),
        args=config,
        train_dataset=task.train_dataset,
        processing_class=tokenizer,
        peft_config=None if peft is None else lora.build_lora_config(peft),
    )
    if spec.dynamic_sampling.enable:
        if not hasattr(type(trainer), "dynamic_sampling"):
            raise TypeError("dynamic sampling needs harness.train.trainer.HarnessGRPOTrainer (or a subclass)")
        trainer.dynamic_sampling = spec.dynamic_sampling
    from harness.losses import for_run

    plugin, hparams = for_run(spec.settings)  # (None, {}) for TRL's own loss types
    if plugin is not None:
        if not hasattr(type(trainer), "loss_plugin"):  # plain GRPOTrainer would run its own loss instead
            raise TypeError(
                f"loss plugin {plugin.name!r} needs harness.train.trainer.HarnessGRPOTrainer (or a subclass)"
            )
        trainer.loss_plugin, trainer.loss_hparams = plugin, hparams
    return trainer, task, tokenizer


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _process_state(device: str):
    """accelerate's ``PartialState`` as the trainer will set it up, so that every rank knows its
    place before the trainer exists: transformers' ``TrainingArguments`` resets any earlier state
    and passes ``cpu`` on a CPU run. A plain ``PartialState()`` on a CPU run with several processes
    says one process (every rank the main one), and a state left by the tiny model's
    single-process warm start in this process says so too. Initialises ``torch.distributed`` (env://)
    when the environment names several processes."""
    from accelerate.state import AcceleratorState, PartialState

    AcceleratorState._reset_state(reset_partial_state=True)
    return PartialState(cpu=device == "cpu")


def skip_deepspeed_shm_op() -> None:
    """Keep DeepSpeed from compiling its CPU shared-memory collective op when its communication
    backend starts (``deepspeed.comm.torch.build_shm_op``, a C++ extension built with ninja on the
    first start in each environment: 1-2 minutes of both cores on 2 cores, without a line of
    output). Only ``inference_all_reduce`` (tensor-parallel inference, ``deepspeed.module_inject``)
    calls that op, and without it DeepSpeed falls back to ``torch.distributed.all_reduce``; ZeRO's
    training collectives never use it. A no-op where DeepSpeed is absent."""
    import importlib

    try:  # by its module path: the attribute deepspeed.comm.torch is the torch package
        backend = importlib.import_module("deepspeed.comm.torch")
    except ImportError:
        return
    backend.build_shm_op = lambda: None


def _hosts(state) -> list[str] | None:
    """Every process's host name in rank order (a list of ``num_processes`` strings) when the run
    has several processes, else None. A collective: every rank calls it."""
    if state.num_processes <= 1:
        return None
    import torch.distributed as dist

    hosts: list[Any] = [None] * state.num_processes
    dist.all_gather_object(hosts, socket.gethostname())
    return [str(h) for h in hosts]


def train(
    spec: RunSpec,
    run_dir: str | Path,
    device: str | None = None,
    threads: int | None = None,
    stop_requested: Callable[[], bool] | None = None,
    stop_before_first_step: Callable[[], bool] | None = None,
) -> dict:
    """Train one run into ``run_dir`` and return its summary (also written as the DONE marker).

    Args:
        spec: the run.
        run_dir: ``results/<grid>/runs/<run_id>``.
        device: "cpu" or "cuda"; None resolves ``harness.device`` on this machine.
        threads: torch threads; None = ``harness.threads`` or 1.
        stop_requested: polled after every optimizer step; when it returns True the run saves a
            checkpoint at that step and returns ``{"preempted": True, ...}`` without a DONE marker.
        stop_before_first_step: polled before the first step, at each phase
            (:class:`harness.train.phases.RunPhases`) and about every second of a model build
            or of the wait for one; when it returns True the run stops at once, nothing trained,
            and returns ``{"preempted": True, "steps": <its resume step>, "phase": <where it
            was>}``. An executor passes the same flag as ``stop_requested``.

    Raises:
        RunDiverged: loss, reward or grad_norm became NaN/inf (a DIVERGED marker names the step, the
            first non-finite metric and its value).
        Anything the trainer raises; the run's files stay readable.
    """
    run_dir = Path(run_dir)
    done = ending.finished(run_dir)
    if done is not None:
        return done
    import filelock

    run_dir.mkdir(parents=True, exist_ok=True)
    # One writer per run: a re-run started while an earlier process (say, one orphaned by a killed
    # `grpo-harness run`) still trains this run must not write into it too. Only the first rank of a
    # multi-process run takes it.
    lock = filelock.FileLock(str(run_dir / layout.RUN_LOCK_FILE))
    if int(os.environ.get("RANK", "0")) == 0:
        try:
            lock.acquire(timeout=1)  # a status probe (layout.lock_held) holds it for microseconds
        except filelock.Timeout as e:
            raise RunBusy(
                f"run {spec.run_id} is {layout.trained_elsewhere(run_dir)}; it was left to that process"
            ) from e
    owner = run_dir / layout.OWNER_FILE
    try:
        if lock.is_locked:  # tells `status` which live process trains this run
            atomic_write_json(owner, {"host": socket.gethostname(), "pid": os.getpid()})
        phases = RunPhases(run_dir, int(os.environ.get("RANK", "0")) == 0, stop_before_first_step)
        return _attempt(spec, run_dir, device, threads, stop_requested, phases, lock.is_locked)
    finally:
        if lock.is_locked:
            owner.unlink(missing_ok=True)
            lock.release()


def _attempt(spec, run_dir: Path, device, threads, stop_requested, phases: RunPhases, recorded: bool) -> dict:
    """One attempt of the run, and its end record in the attempts log when ``recorded`` (rank 0,
    which holds the run's lock; :mod:`harness.train.ending` tells an error's). A stop asked for
    before the first step ends it at once (:class:`harness.train.phases.RunStopped`, raised by
    ``phases``), as stopped at its resume step."""
    try:
        summary = _train_unlocked(spec, run_dir, device, threads, phases, stop_requested)
    except RunStopped:  # nothing trained in this attempt, so nothing new to checkpoint
        step = checkpoints.resume_point(run_dir / layout.CHECKPOINTS_DIR).step
        summary = {"run_id": spec.run_id, "steps": step, "preempted": True, "phase": phases.text}
    except BaseException as e:
        if recorded:
            ending.record_failure(run_dir, e)
        raise
    if recorded:
        detail = f"at step {summary['steps']}" + (f" ({summary['phase']})" if summary.get("phase") else "")
        ending.record_end(run_dir, ending.STOPPED if summary.get("preempted") else ending.DONE, detail)
    return summary


def _start(
    spec: RunSpec, run_dir: Path, device: str | None, threads: int | None, phases: RunPhases | None = None
):
    """Clear the markers of an earlier attempt (its progress replaced by the setup phase), set the
    device, threads and seeds, and write the run's config and provenance (rank 0 alone writes; with
    several processes the provenance's ``hosts`` lists each rank's host). Returns ``(settings,
    device, accelerate state, provenance)``; ``phases`` (:class:`harness.train.phases.RunPhases`)
    is told of the setup."""
    first = int(os.environ.get("RANK", "0")) == 0
    if first:
        ending.clear_markers(run_dir)
        layout.remove_temporaries(run_dir)  # what a kill between write and rename left behind
        layout.remove_temporaries(run_dir / layout.METRICS_DIR)
    phases = phases or RunPhases(run_dir, write=first)
    phases.enter(layout.PHASE_SETUP, "setting up: loading torch, transformers and TRL")
    import torch

    from harness.trl_boundary import resolve_device

    settings = spec.harness
    device = device or resolve_device(settings.device, ExecutorSettings())
    torch.set_num_threads(threads or settings.threads or 1)
    seed_everything(spec.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    if first:
        atomic_write_json(
            run_dir / layout.CONFIG_FILE,
            {
                "run_id": spec.run_id,
                "grid": spec.grid,
                "config": spec.to_json(),
                "varying": dict(spec.varying),
            },
        )
    prov = provenance(device)
    plugin, _ = losses.for_run(spec.settings)
    if plugin is not None:  # which plugin code trained this run (run ids hold settings only)
        prov["loss_plugin"] = losses.source_record(plugin)
    if device == "cpu" and spec.get("trainer.deepspeed"):
        skip_deepspeed_shm_op()
    state = _process_state(device)
    hosts = _hosts(state)
    if hosts:
        prov["hosts"] = hosts
    if state.is_main_process:
        atomic_write_json(run_dir / layout.PROVENANCE_FILE, prov)
    return settings, device, state, prov


def _train_unlocked(spec, run_dir, device, threads, phases: RunPhases, stop_requested) -> dict:
    from harness.losses import grpo_config_kwargs
    from harness.trl_boundary import build_grpo_config

    settings, device, state, prov = _start(spec, run_dir, device, threads, phases)
    ckpt_dir = run_dir / layout.CHECKPOINTS_DIR
    resume = checkpoints.resume_point(ckpt_dir)
    resumed_from = resume.step if resume.path else None
    writer = _writer(spec, run_dir, settings) if state.is_main_process else None
    offsets = _resume_records(writer, run_dir, resume.step)
    if state.is_main_process:  # before the model: a stop while it is built ends this attempt
        _record_attempt(spec, run_dir, prov, resume, writer)
    model_path = prepare_model(spec, run_dir, phases)
    phases.enter(layout.PHASE_SETUP, "setting up the trainer's settings (GRPOConfig)")
    kwargs = grpo_config_kwargs(spec, device, str(ckpt_dir))
    track, tracked = trackers.tracker_run(spec), trackers.named(kwargs.get("report_to"))
    config = build_grpo_config({**trackers.trainer_settings(track, tracked), **kwargs}, device)

    if resume.path and resume.step >= config.max_steps:
        # killed after its last checkpoint but before DONE: every step is trained and its metrics were
        # flushed before that checkpoint was written; training again would add a step past max_steps
        summary = {"run_id": spec.run_id, "steps": resume.step, "seconds": 0.0, "resumed_from": resume.step}
        return _finish(writer, run_dir, {**summary, "device": device})

    max_new = settings.eval_max_new_tokens or config.max_completion_length
    with trackers.environment(track, run_dir.parent.parent, tracked):
        trainer, task, tokenizer = build_trainer(spec, model_path, config, phases=phases)
    # TRL's checkpoint holds the policy, not a synced reference
    checkpoints.load_ref_model(trainer, resume.path)
    if spec.dynamic_sampling.enable:
        trainer.dynamic_sampling_log = run_dir / layout.DS_LOG_FILE

    eval_fn, sampled_eval_fn = _eval_fns(spec, task, tokenizer, max_new)

    from harness.train.sharing import MachineLease

    # rank 0 tells other runs on this machine that it trains here (harness.train.sharing)
    lease = MachineLease(spec.run_id, device, min_interval_s=5.0) if state.is_main_process else None
    callback = make_callback(
        trainer=trainer,
        writer=writer,
        settings=settings,
        device=device,
        eval_fn=eval_fn,
        sampled_eval_fn=sampled_eval_fn,
        samples_path=run_dir / layout.SAMPLES_FILE,
        offsets=offsets,
        max_steps=config.max_steps,
        stop_requested=stop_requested,
        machine_lease=lease,
        share_logs=bool(tracked),
        phases=phases,
    )
    # after transformers' flow callback, before the trackers': they log what it adds to the step's logs
    trainer.callback_handler.callbacks.insert(1, callback)
    trackers.start(trainer, track, run_dir, tracked, state.is_main_process)
    phases.enter(layout.PHASE_TRAINER, _starting_words(config, resume))
    seconds = _fit(trainer, resume.path, lease, tracked, state.is_main_process)
    if writer is not None:
        writer.flush()
    summary = {
        "run_id": spec.run_id,
        "steps": trainer.state.global_step,
        "seconds": seconds,
        "resumed_from": resumed_from,
        "device": device,
    }
    return _outcome(spec, run_dir, writer, callback, summary)


def _starting_words(config: Any, resume: checkpoints.ResumePoint) -> str:
    """What the trainer does until the first step ends: its start (DeepSpeed's engine, when the
    run has one), the resume from a checkpoint, the first generation."""
    words = "starting the trainer"
    if getattr(config, "deepspeed", None):
        words += " (DeepSpeed: initialising its engine)"
    first = 1
    if resume.path is not None:
        words += f", resuming from {resume.path.name}"
        first = resume.step + 1
    return f"{words}; then step {first} of {config.max_steps}"


def _eval_fns(spec: RunSpec, task, tokenizer, max_new: int) -> tuple[Callable | None, Callable | None]:
    """The run's evals, ``(greedy, sampled)``: ``greedy(model)``, the greedy accuracy
    (:func:`harness.models.tasks.greedy_accuracy`), None when ``harness.eval_steps`` is 0;
    ``sampled(model, step)``, the sampled eval after ``step``
    (:func:`harness.models.tasks.sampled_eval`, seeded by the run's seed and the step), None unless
    ``harness.sampled_eval_n`` > 0 too. Both generate at most ``max_new`` tokens."""
    from harness.models.tasks import greedy_accuracy, sampled_eval

    h = spec.harness
    if h.eval_steps <= 0:
        return None, None

    def greedy(model) -> float:
        return greedy_accuracy(model, tokenizer, task, max_new_tokens=max_new)

    def sampled(model, step: int):
        return sampled_eval(
            model,
            tokenizer,
            task,
            n=h.sampled_eval_n,
            temperature=h.sampled_eval_temperature,
            max_new_tokens=max_new,
            prompts=h.sampled_eval_prompts,
            seed=spec.seed,
            step=step,
        )

    return greedy, (sampled if h.sampled_eval_n > 0 else None)


def _fit(trainer, resume_path: Path | None, lease, tracked, is_main: bool) -> float:
    """Train (from ``resume_path`` when set) while this machine's lease is held; returns seconds.
    The lease is released and the trackers finished whether training ends or raises."""
    t0 = time.perf_counter()
    try:
        if lease is not None:
            lease.register()  # a folder that cannot be written leaves the count empty, nothing else
        trainer.train(resume_from_checkpoint=str(resume_path) if resume_path else None)
    finally:
        if lease is not None:
            lease.release()
        trackers.finish(tracked, is_main)
    return time.perf_counter() - t0


def _writer(spec: RunSpec, run_dir: Path, settings: HarnessSettings) -> MetricsWriter:
    """The run's metrics writer (rank 0): parts of ``flush_every`` rows, written off the step in a
    background thread; the rows go to disk before every checkpoint and at the end."""
    return MetricsWriter(run_dir, spec.run_id, settings.flush_every, background=True)


def _resume_records(writer: MetricsWriter | None, run_dir: Path, resume_step: int) -> dict[str, float]:
    """Drop the metric rows, samples, eval samples and dynamic sampling's groups logged after the
    checkpoint a run resumes from (rank 0;
    they are logged again as the steps are trained again), and return where the running totals
    stand there (elapsed seconds, tokens generated); empty for a fresh run."""
    if writer is None:
        return {}
    writer.truncate_after(resume_step)
    _truncate_samples(run_dir / layout.SAMPLES_FILE, resume_step)
    _truncate_samples(run_dir / layout.DS_LOG_FILE, resume_step)
    _truncate_samples(run_dir / layout.EVAL_SAMPLES_FILE, resume_step)  # step 0, the start eval, stays
    table = read_metrics(run_dir)
    if table is None or not table.num_rows:
        return {}
    last = table.slice(table.num_rows - 1).to_pylist()[0]
    return {k: last.get(k) or 0.0 for k in (layout.ELAPSED_S, layout.TOKENS_GENERATED_TOTAL)}


def _truncate_samples(path: Path, resume_step: int) -> None:
    """Keep the lines of ``samples.jsonl`` (or ``eval_samples.jsonl``) logged at or before
    ``resume_step`` (atomically); a line that does not parse (cut by a kill) is dropped too."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue
        if isinstance(step, int) and step <= resume_step and line.endswith("\n"):
            kept.append(line)
    with layout.atomic_path(path) as tmp:
        Path(tmp).write_text("".join(kept), encoding="utf-8")


def _record_attempt(
    spec: RunSpec, run_dir: Path, prov: dict, resume: checkpoints.ResumePoint, writer: MetricsWriter | None
) -> None:
    """One line in the run's attempts log per start: when, where (``hosts``: each rank's host, when
    the run has several processes), which SLURM job, from which step, which damaged checkpoints
    were passed over and which unreadable metrics files were set aside (both also said on stderr)."""
    attempt = {
        "started_at": prov["started_at"],
        "host": prov["host"],
        **({"hosts": prov["hosts"]} if prov.get("hosts") else {}),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"),
        "resume_from_step": resume.step if resume.path else None,
    }
    if resume.passed_over:
        attempt["damaged_checkpoints"] = dict(resume.passed_over)
        print(f"warning: run {spec.run_id}: {resume.describe()}", file=sys.stderr)
    if writer is not None and writer.quarantined:
        attempt["unreadable_metrics"] = [str(p) for p in writer.quarantined]
        print(
            f"warning: run {spec.run_id}: unreadable metrics file(s) set aside, their steps are "
            f"missing from the metrics: {', '.join(map(str, writer.quarantined))}",
            file=sys.stderr,
        )
    ending.record_start(run_dir, attempt)


def _outcome(spec: RunSpec, run_dir: Path, writer: MetricsWriter | None, callback, summary: dict) -> dict:
    """How training ended: stopped on request (to be resumed), diverged (DIVERGED marker, then
    :class:`harness.train.ending.RunDiverged`), or finished (DONE)."""
    if callback.stopped_step is not None and callback.diverged_step is None:
        return {**summary, "preempted": True}
    if callback.diverged_step is not None:
        if writer is not None:
            writer.compact()
            step, metric, value = callback.diverged_step, callback.diverged_metric, callback.diverged_value
            ending.mark_diverged(run_dir, summary, step, metric, value)
        raise RunDiverged(
            f"run {spec.run_id} diverged at step {callback.diverged_step}: "
            f"{callback.diverged_metric} is {callback.diverged_value}"
        )
    return _finish(writer, run_dir, summary)


def _finish(writer: MetricsWriter | None, run_dir: Path, summary: dict) -> dict:
    """Compact the metrics and write DONE (rank 0); ``summary["steps"]`` is the last optimizer step."""
    if writer is not None:
        writer.compact()
        table = read_metrics(run_dir)
        logged = set(table.column(layout.STEP).to_pylist()) if table is not None else set()
        missing = [s for s in range(1, summary["steps"] + 1) if s not in logged]
        if missing:  # only after a metrics file was damaged (see MetricsWriter.quarantined)
            summary["missing_steps"] = missing
            print(f"warning: run {summary['run_id']}: no metrics for {len(missing)} step(s)", file=sys.stderr)
        ending.mark_done(run_dir, summary)
    return summary
