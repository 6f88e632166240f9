"""The run's ``TrainerCallback``: what the harness records at every optimizer step.

One parquet row per logged step (TRL's logs, the w_seq statistics, time, tokens, memory, the
off-policy state), sampled completions, ``progress.json``, the greedy eval and the sampled one
(pass@k, ``eval_samples.jsonl``), checkpoint markers, and
the stop when a loss, reward or grad_norm turns non-finite. :func:`harness.train.training.train`
makes it with :func:`make_callback`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import resource
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import layout
from harness.layout import atomic_write_json
from harness.settings.schema import HarnessSettings
from harness.train import checkpoints
from harness.train.metrics import MetricsWriter, StepClock

#: Steps whose mean wall time ``progress.json`` reports as the run's speed.
RECENT_STEPS = 10
#: Seconds between two rewrites of ``progress.json`` (the first and the last step are always written).
PROGRESS_EVERY_S = 2.0


def _peak_memory_mb(device: str) -> float:
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def plain_json(value: Any) -> Any:
    """``value`` as plain JSON values: dicts (string keys), lists, strings, numbers, booleans, None.

    Chat messages stay a list of ``{"role", "content"}`` dicts; numpy and torch scalars become numbers,
    arrays and tensors lists; anything else JSON cannot hold becomes its ``str``. Raises nothing.
    """
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain_json(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy / torch scalars and arrays
    if callable(tolist):
        try:
            return plain_json(tolist())
        except Exception:
            pass
    return str(value)


class _StepRecorder:
    """What the run's TrainerCallback does (:func:`make_callback`): writes one parquet row per
    logged optimizer step, TRL's logs + w_seq stats + time/tokens/memory.

    Also runs the greedy eval every ``eval_steps`` and once before the first step, with the sampled
    eval beside it when there is one (time excluded from the step's wall time),
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
        sampled_eval_fn: Callable[[Any, int], Any] | None = None,
        phases: Any = None,
    ):
        self.trainer = trainer
        self.phases = phases  # harness.train.phases.RunPhases: the start eval is the last phase
        self.share_logs = share_logs  # add the harness's values to the step's logs, for the trackers
        self.writer = writer
        self.settings = settings
        self.device = device
        self.eval_fn = eval_fn
        # (model, step) -> harness.models.tasks.SampledEval, run after eval_fn on the same steps
        self.sampled_eval_fn = sampled_eval_fn if eval_fn is not None else None
        self.samples_path = samples_path
        self.elapsed_offset = offsets.get(layout.ELAPSED_S, 0.0)
        self.generated_total = offsets.get(layout.TOKENS_GENERATED_TOTAL, 0.0)
        self.max_steps = max_steps
        self.stop_requested = stop_requested
        self.stopped_step: int | None = None
        self.machine_lease = machine_lease  # harness.train.sharing.MachineLease of rank 0, or None
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
        from harness.train.wseq import wseq_stats  # imports torch: only once a run trains

        self._wseq_stats = wseq_stats

    def on_train_begin(self, args, state, control, **kw):
        import torch

        self._threads = torch.get_num_threads()
        self._start_eval(args, state)
        self._t0 = time.perf_counter()
        self.clock.start()

    def _start_eval(self, args, state) -> None:
        """The greedy eval of the starting policy (and the sampled one, when on), once per run,
        before the first optimizer step (its time is no step's): written to
        :data:`harness.layout.START_EVAL_FILE` by rank 0, the samples to
        :data:`harness.layout.EVAL_SAMPLES_FILE` as step 0 (replacing the file: an attempt killed
        before the start eval's file was written left at most step 0's lines there). Not on resume
        (the trainer resumed past step 0) and not when the file is already there (a run that failed
        before its first checkpoint starts again from step 0 with the same weights). The torch RNG
        state is restored after it, so training draws exactly what it would without it
        (``tests/test_start_eval.py``)."""
        if self.eval_fn is None:
            return
        path = self.samples_path.parent / layout.START_EVAL_FILE
        if self._agreed(args, state.global_step > 0 or path.exists()):
            return
        import torch

        if self.phases is not None:  # every rank agrees on stopping at a step boundary, not here
            words = f"evaluating the starting policy; then step 1 of {self.max_steps}"
            self.phases.enter(layout.PHASE_EVAL, words, stoppable=False)
        t0 = time.perf_counter()
        devices = [torch.cuda.current_device()] if self.device == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            accuracy, sampled = self._evaluate(state, 0)
        if not state.is_world_process_zero or accuracy is None:
            return
        record = {layout.STEP: 0, layout.EVAL_ACCURACY: accuracy, "seconds": time.perf_counter() - t0}
        if sampled is not None:
            self._write_eval_samples(sampled, replace=True)
            record.update(sampled_columns(sampled))
            record.update(
                {
                    "sampled_eval_n": sampled.n,
                    "sampled_eval_temperature": sampled.temperature,
                    "sampled_eval_prompts": len(sampled.prompts),
                    "sampled_seconds": sampled.seconds,
                }
            )
        atomic_write_json(path, record)

    def _evaluate(self, state, step: int) -> tuple[float | None, Any]:
        """The greedy accuracy of the model now and its sampled eval after ``step`` (a
        :class:`harness.models.tasks.SampledEval`, or None when off), on rank 0; ``(None, None)``
        on the other ranks."""
        from trl.models import unwrap_model_for_generation

        # Under ZeRO-3 every rank holds a shard and every forward pass is a collective (the
        # start-of-forward hook checks that the ranks agree), even with the parameters gathered:
        # every rank generates the same greedy completions, in step, and rank 0 records them. The
        # sampled eval seeds every rank alike (the run's seed and the step), so they draw the same
        # samples too, and transformers' generate keeps ranks that finish early in step
        # (synced_gpus under ZeRO-3)
        trainer = self.trainer
        every = checkpoints.zero3(trainer)
        accuracy = sampled = None
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as whole:
            if every or state.is_world_process_zero:
                accuracy = float(self.eval_fn(whole))
                if self.sampled_eval_fn is not None:
                    sampled = self.sampled_eval_fn(whole, step)
        return (accuracy, sampled) if state.is_world_process_zero else (None, None)

    def _write_eval_samples(self, sampled, replace: bool = False) -> None:
        """One line of :data:`harness.layout.EVAL_SAMPLES_FILE` per prompt of ``sampled`` (a
        :class:`harness.models.tasks.SampledEval`): appended, or written as the whole file
        (atomically) when ``replace``."""
        lines = "".join(
            json.dumps(
                {
                    "step": sampled.step,
                    "index": i,
                    "prompt": plain_json(prompt),
                    "completions": list(completions),
                    "scores": [float(x) for x in scores],
                }
            )
            + "\n"
            for i, (prompt, completions, scores) in enumerate(
                zip(sampled.prompts, sampled.completions, sampled.scores, strict=True)
            )
        )
        path = self.samples_path.parent / layout.EVAL_SAMPLES_FILE
        if replace:
            with layout.atomic_path(path) as tmp:
                Path(tmp).write_text(lines, encoding="utf-8")
        else:
            with open(path, "a", encoding="utf-8") as f:
                f.write(lines)

    def on_step_end(self, args, state, control, model=None, **kw):
        self.clock.stop()
        self.clock.step_done()
        if control.should_save:  # transformers may rotate old checkpoints before on_save
            self.finish_marking()
        step = state.global_step
        s = self.settings
        due = s.eval_steps > 0 and (step % s.eval_steps == 0 or step == self.max_steps)
        if self.eval_fn is not None and due:
            accuracy, sampled = self._evaluate(state, step)
            if accuracy is not None:
                self._pending[layout.EVAL_ACCURACY] = accuracy
            if sampled is not None:
                self._pending.update(sampled_columns(sampled))
                self._write_eval_samples(sampled)
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
        return self._agreed(args, bool(self.stop_requested()))

    @staticmethod
    def _agreed(args, flag: bool) -> bool:
        """``flag`` made the same on every rank: true when it is true on any (a collective)."""
        import torch
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            t = torch.tensor([float(flag)], device=args.device if args.device.type != "mps" else "cpu")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = bool(t.item())
        return flag

    def _write_samples(self, step: int) -> None:
        logs = self.trainer._logs
        n = min(self.settings.samples_n, len(logs["prompt"]))
        rewards = {name: list(v)[-n:] for name, v in logs["rewards"].items()}
        with open(self.samples_path, "a") as f:
            for i in range(n):
                j = len(logs["prompt"]) - n + i
                record = {
                    "step": step,
                    "prompt": plain_json(logs["prompt"][j]),
                    "completion": plain_json(logs["completion"][j]),
                    "rewards": {k: plain_json(v[i]) for k, v in rewards.items()},
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
        checkpoints.barrier()
        step = state.global_step
        checkpoints.save_ref_model(
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
        judged by inspection, as a kill inside :func:`harness.train.checkpoints.mark_complete` always did."""
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
                **{k: v for k, v in records.items() if k.startswith(layout.DS_PREFIX)},
            }
        )
        self._pending = {}
        if (
            self.share_logs and shared is not None
        ):  # the trackers' callbacks come next (harness.train.trackers)
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


def sampled_columns(sampled) -> dict[str, float]:
    """The metrics columns of a sampled eval (a :class:`harness.models.tasks.SampledEval`):
    ``eval/pass@<k>`` for each of its k (:data:`harness.layout.PASS_AT_PREFIX`) and
    :data:`harness.layout.SAMPLED_ACCURACY`."""
    columns = {f"{layout.PASS_AT_PREFIX}{k}": float(v) for k, v in sampled.pass_at.items()}
    columns[layout.SAMPLED_ACCURACY] = float(sampled.accuracy)
    return columns


def _lease_pids(lease) -> Callable[[], list[int]] | None:
    """A function returning the process ids of the harness's runs on this host other than this
    one, read from the lease folder of ``lease`` (:class:`harness.train.sharing.MachineLease`); None
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
    """The pid of a lease file of this host (:mod:`harness.train.sharing`); None for another host's, or
    a file that cannot be read."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("host") != socket.gethostname():
        return None
    pid = info.get("pid")
    return pid if isinstance(pid, int) else None


def make_callback(**kwargs):
    """The run's ``TrainerCallback`` (:class:`_StepRecorder`'s hooks on transformers' base class),
    made when a run starts so that importing this module stays light."""
    from transformers import TrainerCallback

    return type("RecordingCallback", (_StepRecorder, TrainerCallback), {})(**kwargs)
