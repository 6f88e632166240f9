"""One run: build the task, the model and TRL's trainer, train (resuming from a checkpoint), record.

``train(spec, run_dir)`` is what every executor calls, in a fresh process (submitit local or SLURM)
or in-process (debug). It is idempotent: a run with a DONE marker returns at once; a run with
checkpoints resumes from the latest and drops metric rows logged after it, so every step ends up
in the parquet exactly once.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import random
import resource
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import checkpoints, layout, losses, trackers
from harness.config import lora
from harness.config.schema import ExecutorSettings, HarnessSettings, RunSpec
from harness.metrics import MetricsWriter, StepClock, atomic_write_json, provenance, read_metrics

MODEL_CACHE_ENV = "GRPO_HARNESS_CACHE"
#: Steps whose mean wall time ``progress.json`` reports as the run's speed.
RECENT_STEPS = 10
#: Seconds between two rewrites of ``progress.json`` (the first and the last step are always written).
PROGRESS_EVERY_S = 2.0


class RunBusy(RuntimeError):
    """Another process is training this run right now (it holds the run's lock); nothing was changed."""


class RunDiverged(RuntimeError):
    """Loss, reward or grad_norm became NaN or infinite; the run stopped and left a DIVERGED marker."""


def model_cache_dir(grid_dir: Path) -> Path:
    """Where built models are cached: ``$GRPO_HARNESS_CACHE`` or ``<results root>/.cache/models``."""
    env = os.environ.get(MODEL_CACHE_ENV)
    return Path(env) if env else Path(grid_dir).resolve().parent / ".cache" / "models"


def prepare_model(spec: RunSpec, run_dir: str | Path) -> str:
    """The run's model as a local path or hub id, building the tiny model into the cache if needed.

    Call it before setting up ``torch.distributed`` for a multi-process run: the tiny model's warm
    start is a single-process SFT, and the cache's file lock makes the other ranks wait for it.
    """
    from harness.models.tiny import resolve_model

    return resolve_model(
        spec.model,
        task=spec.task,
        cache_dir=model_cache_dir(Path(run_dir).parent.parent),
        tiny_spec=spec.tiny,
    )


def build_trainer(spec: RunSpec, model_path: str, config: Any, trainer_class: type | None = None):
    """The run's tokenizer, task and TRL trainer, the one place a ``GRPOTrainer`` is made.

    Args:
        spec: the run (its task and seed).
        model_path: what :func:`prepare_model` returned (a folder or a hub id).
        config: the run's ``GRPOConfig`` (:func:`harness.trl_boundary.build_grpo_config`).
        trainer_class: ``GRPOTrainer`` or a subclass; default
            :class:`harness.trainer.HarnessGRPOTrainer`, which records w_seq.

    Returns:
        ``(trainer, task, tokenizer)``.
    """
    from transformers import AutoTokenizer

    from harness.models.tasks import build_task

    if trainer_class is None:
        from harness.trainer import HarnessGRPOTrainer as trainer_class
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=os.path.isdir(model_path))
    task = build_task(spec.task, seed=spec.seed, tokenizer=tokenizer)
    peft = spec.settings.get(lora.SECTION)  # None: every weight trains
    trainer = trainer_class(
        model=model_path,
        reward_funcs=task.reward_funcs,
        args=config,
        train_dataset=task.train_dataset,
        processing_class=tokenizer,
        peft_config=None if peft is None else lora.build_lora_config(peft),
    )
    from harness.losses import for_run

    plugin, hparams = for_run(spec.settings)  # (None, {}) for TRL's own loss types
    if plugin is not None:
        if not hasattr(type(trainer), "loss_plugin"):  # plain GRPOTrainer would run its own loss instead
            raise TypeError(
                f"loss plugin {plugin.name!r} needs harness.trainer.HarnessGRPOTrainer (or a subclass)"
            )
        trainer.loss_plugin, trainer.loss_hparams = plugin, hparams
    return trainer, task, tokenizer


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _peak_memory_mb(device: str) -> float:
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON values: dicts (string keys), lists, strings, numbers, booleans, None.

    Chat messages stay a list of ``{"role", "content"}`` dicts; numpy and torch scalars become numbers,
    arrays and tensors lists; anything else JSON cannot hold becomes its ``str``. Raises nothing.
    """
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy / torch scalars and arrays
    if callable(tolist):
        try:
            return jsonable(tolist())
        except Exception:
            pass
    return str(value)


class _StepRecorder:
    """What the run's TrainerCallback does (:func:`_make_callback`): writes one parquet row per
    logged optimizer step, TRL's logs + w_seq stats + time/tokens/memory.

    Also runs the greedy eval every ``eval_steps`` (time excluded from the step's wall time),
    writes sampled completions, and stops training when loss, reward or grad_norm turns
    non-finite (remembering the first such step, metric and value).
    """

    def __init__(
        self,
        trainer,
        writer: MetricsWriter | None,
        settings: HarnessSettings,
        device: str,
        eval_fn: Callable[[Any], float] | None,
        samples_path: Path,
        offsets: dict[str, float],
        max_steps: int,
        stop_requested: Callable[[], bool] | None = None,
        machine_lease: Any = None,
        share_logs: bool = False,
    ):
        self.trainer = trainer
        self.share_logs = share_logs  # add the harness's values to the step's logs, for the trackers
        self.writer = writer
        self.settings = settings
        self.device = device
        self.eval_fn = eval_fn
        self.samples_path = samples_path
        self.elapsed_offset = offsets.get(layout.ELAPSED_S, 0.0)
        self.generated_total = offsets.get(layout.TOKENS_GENERATED_TOTAL, 0.0)
        self.max_steps = max_steps
        self.stop_requested = stop_requested
        self.stopped_step: int | None = None
        self.machine_lease = machine_lease  # harness.sharing.MachineLease of rank 0, or None
        self.diverged_step: int | None = None
        self.diverged_metric: str | None = None
        self.diverged_value: str | None = None
        self._pending: dict[str, float] = {}
        self._recent: list[float] = []  # wall seconds of the last steps, for progress.json
        self._reward: float | None = None
        self._progress_at = -math.inf  # time.monotonic() of the last progress.json
        self.clock = StepClock(device, harness_pids=_lease_pids(machine_lease))
        self._marking: threading.Thread | None = None  # the last checkpoint's marker being written
        self._marking_error: BaseException | None = None
        self._threads = 1
        from harness.wseq import wseq_stats  # imports torch: only once a run trains

        self._wseq_stats = wseq_stats

    def on_train_begin(self, args, state, control, **kw):
        import torch

        self._threads = torch.get_num_threads()
        self._t0 = time.perf_counter()
        self.clock.start()

    def on_step_end(self, args, state, control, model=None, **kw):
        self.clock.stop()
        self.clock.step_done()
        if control.should_save:  # transformers may rotate old checkpoints before on_save
            self.finish_marking()
        step = state.global_step
        s = self.settings
        due = s.eval_steps > 0 and (step % s.eval_steps == 0 or step == self.max_steps)
        if self.eval_fn is not None and due:
            from trl.models import unwrap_model_for_generation

            # Under ZeRO-3 every rank holds a shard and every forward pass is a collective (the
            # start-of-forward hook checks that the ranks agree), even with the parameters gathered:
            # every rank generates the same greedy completions, in step, and rank 0 records them
            trainer = self.trainer
            every = _zero3(trainer)
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as whole:
                if every or state.is_world_process_zero:
                    accuracy = float(self.eval_fn(whole))
                    if state.is_world_process_zero:
                        self._pending[layout.EVAL_ACCURACY] = accuracy
        if s.samples_steps > 0 and step % s.samples_steps == 0 and state.is_world_process_zero:
            self._write_samples(step)
        if self.stop_requested is not None and step < self.max_steps and self._agreed_stop(args):
            # save (model, optimizer, scheduler, RNG) at this step boundary, then leave train()
            control.should_save = True
            control.should_training_stop = True
            self.stopped_step = step
        self.clock.start()  # the eval's time is not the step's

    def _agreed_stop(self, args) -> bool:
        """Every rank must stop at the same step: a stop request on any rank stops all."""
        import torch
        import torch.distributed as dist

        stop = bool(self.stop_requested())
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([float(stop)], device=args.device if args.device.type != "mps" else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = bool(flag.item())
        return stop

    def _write_samples(self, step: int) -> None:
        logs = self.trainer._logs
        n = min(self.settings.samples_n, len(logs["prompt"]))
        rewards = {name: list(v)[-n:] for name, v in logs["rewards"].items()}
        with open(self.samples_path, "a") as f:
            for i in range(n):
                j = len(logs["prompt"]) - n + i
                record = {
                    "step": step,
                    "prompt": jsonable(logs["prompt"][j]),
                    "completion": jsonable(logs["completion"][j]),
                    "rewards": {k: jsonable(v[i]) for k, v in rewards.items()},
                    "advantage": float(logs["advantages"][j]),
                }
                if not isinstance(logs["prompt"][j], str):
                    record["prompt_text"] = self._prompt_text(logs["prompt"][j])
                f.write(json.dumps(record) + "\n")

    def _prompt_text(self, messages: list) -> str:
        """The text a chat prompt became: the trainer's chat template (its tokenizer's, unless the
        trainer was given another) with the generation prompt, rendered as TRL renders it."""
        trainer = self.trainer
        return trainer.processing_class.apply_chat_template(
            messages,
            chat_template=getattr(trainer, "chat_template", None),
            add_generation_prompt=True,
            tokenize=False,
            **(getattr(trainer, "chat_template_kwargs", None) or {}),
        )

    def on_save(self, args, state, control, **kw):
        """transformers has written ``checkpoint-<step>``: mark it complete (files flushed, marker
        last), then keep the newest ``keep_checkpoints`` complete ones, unless the trainer block
        set ``save_total_limit`` and transformers prunes; both in a thread while training goes on
        (:meth:`_mark`, waited for before the next checkpoint and at the end). With several
        processes every rank writes its own RNG state into the checkpoint: all of them finish
        before rank 0 lists the files."""
        _barrier()
        step = state.global_step
        _save_ref_model(
            self.trainer, Path(args.output_dir) / f"checkpoint-{step}", state.is_world_process_zero
        )
        if not state.is_world_process_zero:
            return
        self.finish_marking()
        keep = self.settings.keep_checkpoints if args.save_total_limit is None else None
        ckpt = Path(args.output_dir) / f"checkpoint-{step}"
        self._marking = threading.Thread(
            target=self._mark, args=(ckpt, step, args.output_dir, keep), name="checkpoint-marker"
        )
        self._marking.start()

    def _mark(self, ckpt: Path, step: int, output_dir: str, keep: int | None) -> None:
        """Off the training step (a thread; its fsyncs are most of a checkpoint's cost to the
        harness): mark ``ckpt`` complete, then prune. A kill before the marker leaves a checkpoint
        judged by inspection, as a kill inside :func:`harness.checkpoints.mark_complete` always did."""
        try:
            checkpoints.mark_complete(ckpt, step)
            if keep is not None:
                checkpoints.prune(output_dir, keep)
        except BaseException as e:  # raised on the training thread by finish_marking
            self._marking_error = e

    def finish_marking(self) -> None:
        """Wait for the last checkpoint's marker and pruning (:meth:`_mark`); raise their error
        (an OSError of a full disk). Called before the next checkpoint is written and when
        training ends."""
        if self._marking is not None:
            self._marking.join()
            self._marking = None
        error, self._marking_error = self._marking_error, None
        if error is not None:
            raise error

    def on_train_end(self, args, state, control, **kw):
        self.finish_marking()

    def on_log(self, args, state, control, logs=None, **kw):
        shared, logs = logs, dict(logs or {})
        if "train_runtime" in logs:  # the trainer's end-of-training summary, not a step
            return
        records = self.trainer.pop_step_records()
        timing = self.clock.take()
        # TRL's logged values are gathered over ranks, so every rank sees the same ones and stops
        # at the same step (a rank that trained on alone would wait forever in a collective).
        for key in ("loss", "reward", "grad_norm"):
            v = logs.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool) and not math.isfinite(v):
                if self.diverged_step is None:
                    self.diverged_step, self.diverged_metric = state.global_step, key
                    self.diverged_value = repr(float(v))
                control.should_training_stop = True
        if not state.is_world_process_zero:
            self._pending = {}
            return
        self.generated_total += records[layout.TOKENS_GENERATED]
        row: dict[str, Any] = {
            k: v for k, v in logs.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        row.update(self._pending)
        # The w_seq statistics are computed when the row is written, off the training step, unless
        # the trackers' callbacks (next) need them now
        wseq = functools.partial(
            self._wseq_stats, records["log_w"], records["log_s"], records["advantages"], records["n_masked"]
        )
        if self.share_logs and shared is not None:
            row.update(wseq())
            wseq = None
        row.update(
            {
                layout.STEP: state.global_step,
                **timing,
                layout.RUN_THREADS: float(self._threads),
                layout.ELAPSED_S: self.elapsed_offset + time.perf_counter() - self._t0,
                layout.TOKENS_GENERATED: records[layout.TOKENS_GENERATED],
                layout.TOKENS_TRAINED: records[layout.TOKENS_TRAINED],
                layout.TOKENS_GENERATED_TOTAL: self.generated_total,
                layout.PEAK_MEMORY_MB: _peak_memory_mb(self.device),
                layout.OFF_POLICY: records[layout.OFF_POLICY],
                layout.POLICY_LAG: records[layout.POLICY_LAG],
                layout.REUSE_INDEX: records[layout.REUSE_INDEX],
                layout.CONCURRENT_RUNS: self._concurrent_runs(),
            }
        )
        self._pending = {}
        if self.share_logs and shared is not None:  # the trackers' callbacks come next (harness.trackers)
            shared.update({k: v for k, v in row.items() if k not in shared and k != layout.STEP})
        self._write_progress(row, force=bool(control.should_save or control.should_training_stop))
        if self.writer is not None:
            self.writer.append(row, more=wseq)
            if control.should_save:  # the trainer saves a checkpoint next: its rows go to disk first
                self.writer.flush()

    def _write_progress(self, row: dict[str, Any], force: bool = False) -> None:
        """``progress.json`` for live displays (:func:`harness.layout.read_progress`): the step,
        the latest reward and the mean wall time of the last :data:`RECENT_STEPS` steps. Rewritten
        at most every :data:`PROGRESS_EVERY_S` seconds, except on the first and the last step and
        when ``force`` (a checkpoint or a stop comes next): a display is at most that much behind."""
        if self.writer is None:
            return
        self._recent.append(row[layout.STEP_WALL_S])
        del self._recent[:-RECENT_STEPS]
        if isinstance(row.get("reward"), int | float) and math.isfinite(row["reward"]):
            self._reward = float(row["reward"])
        now = time.monotonic()
        last = row[layout.STEP] >= self.max_steps
        if not (force or last or now - self._progress_at >= PROGRESS_EVERY_S):
            return
        self._progress_at = now
        info = {
            "step": int(row[layout.STEP]),
            "max_steps": self.max_steps,
            "reward": self._reward,
            "s_per_step": sum(self._recent) / len(self._recent),
            "updated_at": time.time(),
        }
        with contextlib.suppress(OSError):  # a display's nicety: never fail a run over it
            atomic_write_json(self.samples_path.parent / layout.PROGRESS_FILE, info)

    def _concurrent_runs(self) -> float | None:
        """Runs sharing the machine now (time-throttled recount); None when unknown."""
        if self.machine_lease is None:
            return None
        try:
            n = self.machine_lease.count()
        except Exception:  # counting is a nicety: never fail a run over it
            return None
        return None if n is None else float(n)


def _lease_pids(lease) -> Callable[[], list[int]] | None:
    """A function returning the process ids of the harness's runs on this host other than this
    one, read from the lease folder of ``lease`` (:class:`harness.sharing.MachineLease`); None
    without a lease. The function raises nothing: an unreadable folder or lease gives fewer ids."""
    if lease is None:
        return None
    folder, own = Path(lease.folder), os.getpid()
    return lambda: [p for p in map(_lease_pid, _lease_files(folder)) if p is not None and p != own and p > 0]


def _lease_files(folder: Path) -> list[Path]:
    try:
        return list(folder.glob("*.json"))
    except OSError:
        return []


def _lease_pid(path: Path) -> int | None:
    """The pid of a lease file of this host (:mod:`harness.sharing`); None for another host's, or
    a file that cannot be read."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("host") != socket.gethostname():
        return None
    pid = info.get("pid")
    return pid if isinstance(pid, int) else None


def _zero3(trainer) -> bool:
    """Whether the trainer's models are sharded by DeepSpeed ZeRO stage 3."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    return plugin is not None and plugin.zero_stage == 3


@contextlib.contextmanager
def _whole(trainer, model, modifier_rank: int | None = None):
    """``model``'s module with every parameter whole for the block, under ZeRO-3
    (``deepspeed.zero.GatheredParameters``, a collective: every rank enters it; with
    ``modifier_rank`` set, that rank's changes are partitioned again on exit); the unwrapped module
    otherwise. For reading and writing weights, not for a forward pass on one rank."""
    module = trainer.accelerator.unwrap_model(model)
    if not _zero3(trainer):
        yield module
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=modifier_rank):
        yield module


def _save_ref_model(trainer, ckpt: Path, writes: bool = True) -> None:
    """The synced reference model's weights into checkpoint folder ``ckpt``
    (:data:`harness.checkpoints.REF_MODEL`), whole: under ZeRO-3 every rank takes part in gathering
    the shards and the rank with ``writes`` (rank 0) saves them. Nothing when the run does not sync
    its reference model: then it is the base model, which a resumed run loads."""
    ref = getattr(trainer, "ref_model", None)
    if ref is None or not trainer.args.sync_ref_model:
        return
    import torch

    with _whole(trainer, ref) as module:
        if writes:
            weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
            with layout.atomic_path(ckpt / checkpoints.REF_MODEL) as tmp:
                torch.save(weights, tmp)


def _load_ref_model(trainer, ckpt: Path | None) -> None:
    """Put back the reference model saved in checkpoint folder ``ckpt`` (every rank; under ZeRO-3
    rank 0 loads the whole weights and DeepSpeed partitions them again), when the run resumes from
    one that holds it (:func:`_save_ref_model`)."""
    ref = getattr(trainer, "ref_model", None)
    if ckpt is None or ref is None or not (ckpt / checkpoints.REF_MODEL).exists():
        return
    import torch

    weights = torch.load(ckpt / checkpoints.REF_MODEL, map_location="cpu", weights_only=True)
    with _whole(trainer, ref, modifier_rank=0) as module:
        if not _zero3(trainer) or trainer.accelerator.is_main_process:
            module.load_state_dict(weights)


def _barrier() -> None:
    """Wait for every rank of a multi-process run (``torch.distributed``); nothing otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


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


def _hosts(state) -> list[str] | None:
    """Every process's host name in rank order (a list of ``num_processes`` strings) when the run
    has several processes, else None. A collective: every rank calls it."""
    if state.num_processes <= 1:
        return None
    import torch.distributed as dist

    hosts: list[Any] = [None] * state.num_processes
    dist.all_gather_object(hosts, socket.gethostname())
    return [str(h) for h in hosts]


def _make_callback(**kwargs):
    """The run's ``TrainerCallback`` (:class:`_StepRecorder`'s hooks on transformers' base class),
    made when a run starts so that importing this module stays light."""
    from transformers import TrainerCallback

    return type("RecordingCallback", (_StepRecorder, TrainerCallback), {})(**kwargs)


def train(
    spec: RunSpec,
    run_dir: str | Path,
    device: str | None = None,
    threads: int | None = None,
    stop_requested: Callable[[], bool] | None = None,
) -> dict:
    """Train one run into ``run_dir`` and return its summary (also written as the DONE marker).

    Args:
        spec: the run.
        run_dir: ``results/<grid>/runs/<run_id>``.
        device: "cpu" or "cuda"; None resolves ``harness.device`` on this machine.
        threads: torch threads; None = ``harness.threads`` or 1.
        stop_requested: polled after every optimizer step; when it returns True the run saves a
            checkpoint at that step and returns ``{"preempted": True, ...}`` without a DONE marker.

    Raises:
        RunDiverged: loss, reward or grad_norm became NaN/inf (a DIVERGED marker names the step, the
            first non-finite metric and its value).
        Anything the trainer raises; the run's files stay readable.
    """
    run_dir = Path(run_dir)
    done = run_dir / layout.DONE_FILE
    if done.exists():
        return json.loads(done.read_text())
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
        try:
            summary = _train_unlocked(spec, run_dir, device, threads, stop_requested)
        except BaseException as e:
            if lock.is_locked:
                _record_end(run_dir, *_failure(e, run_dir))
            raise
        if lock.is_locked:
            _record_end(
                run_dir, "stopped" if summary.get("preempted") else "done", f"at step {summary['steps']}"
            )
        return summary
    finally:
        if lock.is_locked:
            owner.unlink(missing_ok=True)
            lock.release()


def _start(spec: RunSpec, run_dir: Path, device: str | None, threads: int | None):
    """Clear the markers of an earlier attempt, set the device, threads and seeds, and write the
    run's config and provenance (rank 0 alone writes; with several processes the provenance's
    ``hosts`` lists each rank's host). Returns ``(settings, device, accelerate state,
    provenance)``."""
    import torch

    from harness.trl_boundary import resolve_device

    first = int(os.environ.get("RANK", "0")) == 0
    if first:
        for stale in (layout.DIVERGED_FILE, layout.FAILED_FILE, layout.PROGRESS_FILE):
            (run_dir / stale).unlink(missing_ok=True)
        layout.remove_temporaries(run_dir)  # what a kill between write and rename left behind
        layout.remove_temporaries(run_dir / layout.METRICS_DIR)
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
    state = _process_state(device)
    hosts = _hosts(state)
    if hosts:
        prov["hosts"] = hosts
    if state.is_main_process:
        atomic_write_json(run_dir / layout.PROVENANCE_FILE, prov)
    return settings, device, state, prov


def _train_unlocked(spec, run_dir, device, threads, stop_requested) -> dict:
    from harness.trl_boundary import build_grpo_config, grpo_config_kwargs

    settings, device, state, prov = _start(spec, run_dir, device, threads)

    from harness.models.tasks import greedy_accuracy

    model_path = prepare_model(spec, run_dir)
    ckpt_dir = run_dir / layout.CHECKPOINTS_DIR
    kwargs = grpo_config_kwargs(spec, device, str(ckpt_dir))
    track, tracked = trackers.tracker_run(spec), trackers.named(kwargs.get("report_to"))
    config = build_grpo_config({**trackers.trainer_settings(track, tracked), **kwargs}, device)
    resume = checkpoints.resume_point(ckpt_dir)
    resumed_from = resume.step if resume.path else None
    writer = _writer(spec, run_dir, settings) if state.is_main_process else None
    offsets = _resume_records(writer, run_dir, resume.step)
    if state.is_main_process:
        _record_attempt(spec, run_dir, prov, resume, writer)

    if resume.path and resume.step >= config.max_steps:
        # killed after its last checkpoint but before DONE: every step is trained and its metrics were
        # flushed before that checkpoint was written; training again would add a step past max_steps
        summary = {"run_id": spec.run_id, "steps": resume.step, "seconds": 0.0, "resumed_from": resume.step}
        return _finish(writer, run_dir, {**summary, "device": device})

    max_new = settings.eval_max_new_tokens or config.max_completion_length
    with trackers.environment(track, run_dir.parent.parent, tracked):
        trainer, task, tokenizer = build_trainer(spec, model_path, config)
    _load_ref_model(trainer, resume.path)  # TRL's checkpoint holds the policy, not a synced reference

    def eval_fn(model) -> float:
        return greedy_accuracy(model, tokenizer, task, max_new_tokens=max_new)

    from harness.sharing import MachineLease

    # rank 0 tells other runs on this machine that it trains here (harness.sharing)
    lease = MachineLease(spec.run_id, device, min_interval_s=5.0) if state.is_main_process else None
    callback = _make_callback(
        trainer=trainer,
        writer=writer,
        settings=settings,
        device=device,
        eval_fn=eval_fn if settings.eval_steps > 0 else None,
        samples_path=run_dir / layout.SAMPLES_FILE,
        offsets=offsets,
        max_steps=config.max_steps,
        stop_requested=stop_requested,
        machine_lease=lease,
        share_logs=bool(tracked),
    )
    # after transformers' flow callback, before the trackers': they log what it adds to the step's logs
    trainer.callback_handler.callbacks.insert(1, callback)
    trackers.start(trainer, track, run_dir, tracked, state.is_main_process)
    t0 = time.perf_counter()
    try:
        if lease is not None:
            lease.register()  # a folder that cannot be written leaves the count empty, nothing else
        trainer.train(resume_from_checkpoint=str(resume.path) if resume.path else None)
    finally:
        if lease is not None:
            lease.release()
        trackers.finish(tracked, state.is_main_process)
    if writer is not None:
        writer.flush()
    summary = {
        "run_id": spec.run_id,
        "steps": trainer.state.global_step,
        "seconds": time.perf_counter() - t0,
        "resumed_from": resumed_from,
        "device": device,
    }
    return _outcome(spec, run_dir, writer, callback, summary)


def _writer(spec: RunSpec, run_dir: Path, settings: HarnessSettings) -> MetricsWriter:
    """The run's metrics writer (rank 0): parts of ``flush_every`` rows, written off the step in a
    background thread; the rows go to disk before every checkpoint and at the end."""
    return MetricsWriter(run_dir, spec.run_id, settings.flush_every, background=True)


def _resume_records(writer: MetricsWriter | None, run_dir: Path, resume_step: int) -> dict[str, float]:
    """Drop the metric rows and samples logged after the checkpoint a run resumes from (rank 0;
    they are logged again as the steps are trained again), and return where the running totals
    stand there (elapsed seconds, tokens generated); empty for a fresh run."""
    if writer is None:
        return {}
    writer.truncate_after(resume_step)
    _truncate_samples(run_dir / layout.SAMPLES_FILE, resume_step)
    table = read_metrics(run_dir)
    if table is None or not table.num_rows:
        return {}
    last = table.slice(table.num_rows - 1).to_pylist()[0]
    return {k: last.get(k) or 0.0 for k in (layout.ELAPSED_S, layout.TOKENS_GENERATED_TOTAL)}


def _truncate_samples(path: Path, resume_step: int) -> None:
    """Keep the lines of ``samples.jsonl`` logged at or before ``resume_step`` (atomically); a line
    that does not parse (cut by a kill) is dropped too."""
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
    with open(run_dir / layout.ATTEMPTS_FILE, "a") as f:
        f.write(json.dumps(attempt) + "\n")


def no_space(e: BaseException, run_dir: Path) -> bool:
    """Whether ``e`` ended the attempt because the disk (or quota) is full: an ``OSError`` saying
    so, or any error while the disk holding ``run_dir`` is full (:func:`harness.layout.disk_full`;
    torch's checkpoint writer reports a full disk as ``RuntimeError: ... unexpected pos``). A stop,
    not a failure of the run: it resumes once space is freed."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return layout.disk_full(run_dir)


def _failure(e: BaseException, run_dir: Path) -> tuple[str, str]:
    """``(outcome, detail)`` of an attempt that raised, for its end record."""
    if isinstance(e, RunDiverged):
        return "diverged", str(e)
    if isinstance(e, KeyboardInterrupt):
        return "interrupted", "KeyboardInterrupt"
    if no_space(e, run_dir):
        return "no-space", f"{type(e).__name__}: {e}".splitlines()[0][:500]
    line = f"{type(e).__name__}: {e}".strip().splitlines()
    return "failed", (line[0] if line else type(e).__name__)[:500]


def _record_end(run_dir: Path, outcome: str, detail: str) -> None:
    """The end record of an attempt in the attempts log (rank 0): ``outcome`` (done, stopped,
    diverged, failed, interrupted) and one line of detail. Never raises: a full disk must not hide
    the error that ended the attempt."""
    record = {"ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "outcome": outcome, "detail": detail}
    with contextlib.suppress(OSError), open(run_dir / layout.ATTEMPTS_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")


def _outcome(spec: RunSpec, run_dir: Path, writer: MetricsWriter | None, callback, summary: dict) -> dict:
    """How training ended: stopped on request (to be resumed), diverged (DIVERGED marker, then
    :class:`RunDiverged`), or finished (DONE)."""
    if callback.stopped_step is not None and callback.diverged_step is None:
        return {**summary, "preempted": True}
    if callback.diverged_step is not None:
        if writer is not None:
            writer.compact()
            atomic_write_json(
                run_dir / layout.DIVERGED_FILE,
                {
                    **summary,
                    "step": callback.diverged_step,
                    "metric": callback.diverged_metric,
                    "value": callback.diverged_value,
                },
            )
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
        atomic_write_json(run_dir / layout.DONE_FILE, summary)
    return summary
