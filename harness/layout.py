"""Where a grid's outputs live on disk, and the names of the per-step metric columns.

This module is the contract between the run path (``harness.train.training``, ``harness.train.metrics``) and
``analysis``: both import these names and nothing else from each other.

Layout of one grid's results folder::

    results/<grid>/
        grid.json                  the grid as last planned: name, source YAML, run ids, varying keys
        runs/<run_id>/
            config.json            {"run_id", "grid", "config": nested resolved config, "varying": {...}}
            provenance.json        git commit/dirty, versions, host, device
            metrics/part-*.parquet parts written during the run (atomic: temp name, then rename)
            metrics/metrics.parquet the parts compacted when the run ends; when present, parts are ignored
            samples.jsonl          a few sampled completions every N steps
            eval_start.json        the greedy eval of the starting policy, before the first step
            DONE                   JSON marker: the run finished (steps, seconds)
            DIVERGED               JSON marker: loss, reward or grad_norm became NaN/inf (step, metric, value)
            FAILED                 JSON marker: the run raised (error, log path)
            job.json               SLURM submission record
            attempts.jsonl         one line per start of the run (requeues and re-runs show here)
            checkpoints/           trainer checkpoints (pruned)
            logs/                  executor stdout/stderr
        report/                    figures and tables written by ``grpo-harness report``
        .cache/                    the report's loaded frames (analysis.load), rebuilt when a run's
                                   files change; safe to delete

How a run ended (its DONE, DIVERGED and FAILED markers, the records of ``attempts.jsonl``) is
written by ``harness.train.ending`` alone; :func:`files_state` reads a run's state from them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

GRID_FILE = "grid.json"
RUNS_DIR = "runs"
REPORT_DIR = "report"
CONFIG_FILE = "config.json"
PROVENANCE_FILE = "provenance.json"
METRICS_DIR = "metrics"
COMPACT_FILE = "metrics.parquet"
PART_PREFIX = "part-"
SAMPLES_FILE = "samples.jsonl"
#: Every group dynamic sampling generated: step, generation batch, prompt, completions, rewards,
#: the filter's metric, kept, trained (one JSON line per group; runs that enable it).
DS_LOG_FILE = "dynamic_sampling.jsonl"
DONE_FILE = "DONE"
DIVERGED_FILE = "DIVERGED"
FAILED_FILE = "FAILED"  # JSON marker: the run raised (error line, log path, traceback tail)
OWNER_FILE = ".owner.json"  # {"host", "pid"} of the process training the run now (removed at exit)
RUN_LOCK_FILE = (
    ".run.lock"  # flock held by the process training the run (released by the kernel at its death)
)
JOB_FILE = "job.json"  # SLURM submission record (job id, snapshot, log paths)
PROGRESS_FILE = "progress.json"  # the latest step while a run trains: step, max_steps, reward, s/step, when
#: What a run does before its first optimizer step, the ``kind`` of the phase its ``progress.json``
#: holds until then (:func:`read_phase`): setting up, building an embedded model, waiting for
#: another process's build of it, building the dataset, loading the model and starting the trainer,
#: evaluating the starting policy.
PHASE_SETUP, PHASE_MODEL, PHASE_WAITING = "setup", "model", "waiting"
PHASE_DATASET, PHASE_TRAINER, PHASE_EVAL = "dataset", "trainer", "eval"
PHASES = (PHASE_SETUP, PHASE_MODEL, PHASE_WAITING, PHASE_DATASET, PHASE_TRAINER, PHASE_EVAL)
ATTEMPTS_FILE = "attempts.jsonl"  # one line per start of the run (job id, restart count, resumed step)
#: The greedy eval of the starting policy (``harness.eval_steps`` > 0 only), measured once before
#: the first optimizer step and never again on resume: ``{"step": 0, "eval/accuracy": a, "seconds":
#: s}`` (the eval's wall time), with the sampled eval's columns too where it is on
#: (:data:`SAMPLED_ACCURACY`, ``eval/pass@k``); the low end of normalised scores
#: (:mod:`analysis.tasks`) and the start of pass@k against k (:mod:`analysis.pass_at_k`).
START_EVAL_FILE = "eval_start.json"
#: The sampled eval's completions (``harness.sampled_eval_n`` > 0 only): one JSON line per eval step
#: and prompt, ``{"step", "index", "prompt", "completions": [...], "scores": [...]}`` (step 0: the
#: starting policy, before the first step; ``index``: the prompt's place in the eval split), from
#: which a prompt's correct count (scores equal to 1) and so every pass@k can be recomputed.
EVAL_SAMPLES_FILE = "eval_samples.jsonl"
CHECKPOINTS_DIR = "checkpoints"
GRID_CACHE_DIR = ".cache"  # per grid folder: frames the report loaded, keyed by the runs' files
LOGS_DIR = "logs"

# Identity columns of every metrics row.
RUN_ID = "run_id"
STEP = "step"  # optimizer step, 1-based (TRL's state.global_step after the step)

# Columns the harness adds to TRL's own logged metrics (TRL's keys are kept verbatim:
# "reward", "reward_std", "rewards/<func>/mean", "loss", "kl", "entropy", "clip_ratio/region_mean",
# "vespo/phi_seq_mean", "completions/mean_length", "step_time", ...).
ELAPSED_S = "time/elapsed_s"  # wall-clock seconds since the run (this attempt's trainer) started
STEP_WALL_S = "time/step_s"  # wall-clock seconds of this optimizer step, generation included
TOKENS_GENERATED = "tokens/generated"  # completion tokens generated during this step (all ranks)
TOKENS_TRAINED = "tokens/trained"  # completion tokens that entered the loss this step (all ranks)
TOKENS_GENERATED_TOTAL = "tokens/generated_total"  # cumulative completion tokens generated
PEAK_MEMORY_MB = "memory/peak_mb"  # peak resident memory (CPU: RSS of the process; CUDA: max allocated)
EVAL_ACCURACY = "eval/accuracy"  # greedy accuracy on the held-out split, only on eval steps
# The sampled eval (harness.sampled_eval_n > 0), beside the greedy one on its steps: "eval/pass@1",
# "eval/pass@2", "eval/pass@4", ... up to n (and n itself), the unbiased pass@k of Chen et al.
# (arXiv:2107.03374, Eq. 1) averaged over the prompts (harness.models.passk), and the mean score of
# every sample
PASS_AT_PREFIX = "eval/pass@"
SAMPLED_ACCURACY = "eval/sampled_accuracy"
# Off-policy state of the step, from what TRL did (harness.train.trainer), 0.0/1.0 and counts as floats:
OFF_POLICY = "off_policy"  # 1.0 when a micro-batch's loss used old log-probs of an older policy, else 0.0
REUSE_INDEX = "reuse_index"  # 1-based pass over the generation batch of the step's last micro-batch
POLICY_LAG = "policy_lag"  # max optimizer updates between the old log-probs' policy and the loss's (0 = none)
CONCURRENT_RUNS = "machine/concurrent_runs"  # live runs sharing this run's GPU (or CPUs), itself included
# Dynamic sampling (the grid's dynamic_sampling section; harness.train.trainer), per optimizer step,
# summed over the step's generations (0 in a step that generated nothing); only in runs that enable it:
DS_PREFIX = "dynamic_sampling/"
DS_GROUPS_DRAWN = DS_PREFIX + "groups_drawn"  # groups (prompts x num_generations) generated, every batch
DS_GROUPS_KEPT = DS_PREFIX + "groups_kept"  # of those, groups whose metric was not all equal
DS_GROUPS_TRAINED = DS_PREFIX + "groups_trained"  # groups in the batch trained on (kept, cut to the batch)
DS_GEN_BATCHES = DS_PREFIX + "gen_batches"  # generation batches used, the sampler's own included
DS_COMPLETIONS_GENERATED = DS_PREFIX + "completions_generated"  # = groups_drawn x num_generations
DS_SHORT = DS_PREFIX + "short"  # 1.0 when max_gen_batches ran out before the batch was full, else 0.0
DS_REWARD_GENERATED = DS_PREFIX + "reward_generated"  # mean reward over every completion generated
# What other work on the machine could inflate (harness.train.metrics.StepClock), per optimizer step:
STEP_CPU_S = "time/step_cpu_s"  # CPU seconds (user + system, every thread) of the run's process in the step
STEP_GPU_S = "time/step_gpu_s"  # GPU seconds of the step (CUDA events around it); CUDA runs only
LOAD_1M = "machine/load_1m"  # the machine's 1-minute load average at the step's end
OTHER_CPUS = "machine/other_cpus"  # mean cores busy with work other than the harness's runs during the step
CPU_STALL = "machine/cpu_stall"  # share of the step's wall time some task waited for a CPU (Linux PSI)
CPUS = "machine/cpus"  # logical cores of the machine
RUN_THREADS = "machine/threads"  # torch threads of the run's process

# w_seq statistics (harness.train.wseq): exp(sum_t mask_t (logp_theta - logp_old)) per completion.
WSEQ_PREFIX = "w_seq/"
LOG_WSEQ_PREFIX = "log_w_seq/"
SSEQ_PREFIX = "s_seq/"  # GSPO's length-normalised ratio exp(mean_t ...), a different quantity
#: Per step, ESS/N = (Σw)² / (N·Σw²) of the step's N sequence weights w = w_seq: 1 when every w_seq
#: is equal, 1/N when one completion carries all the weight; NaN on a step without completions.
WSEQ_ESS_FRAC = WSEQ_PREFIX + "ess_frac"

#: The w_seq columns of a metrics row, in order (:func:`harness.train.wseq.wseq_stats` makes them).
WSEQ_COLUMNS: tuple[str, ...] = (
    *(
        WSEQ_PREFIX + k
        for k in (
            "mean",
            "std",
            "min",
            "max",
            "p05",
            "p50",
            "p95",
            "mean_adv_pos",
            "mean_adv_neg",
            "n_adv_pos",
            "n_adv_neg",
            "n",
            "n_inf",
            "n_masked",
            "ess_frac",
        )
    ),
    LOG_WSEQ_PREFIX + "mean",
    LOG_WSEQ_PREFIX + "min",
    LOG_WSEQ_PREFIX + "max",
    SSEQ_PREFIX + "mean",
    SSEQ_PREFIX + "min",
    SSEQ_PREFIX + "max",
)


def pass_at_k(name: str) -> int | None:
    """``k`` of a pass@k column (``"eval/pass@4"`` → 4); None for any other name (``k`` must be a
    positive integer written in decimal digits)."""
    if not isinstance(name, str) or not name.startswith(PASS_AT_PREFIX):
        return None
    k = name[len(PASS_AT_PREFIX) :]
    return int(k) if k.isdigit() and k.isascii() and int(k) >= 1 and k == str(int(k)) else None


def is_eval_metric(name: str) -> bool:
    """Whether ``name`` is logged on eval steps only (greedy accuracy, sampled accuracy, pass@k):
    a run's final value of it is its last evaluation, not a mean over its last steps."""
    return name in (EVAL_ACCURACY, SAMPLED_ACCURACY) or pass_at_k(name) is not None


# Run states: one vocabulary for ``plan``, ``run``, ``submit``, ``status`` and ``report``
# (harness.cluster.status tells them; analysis.states reads the same files).
PENDING = "pending"  # never started: no config.json yet
QUEUED = "queued"  # submitted, waiting in the scheduler's queue
RUNNING = "running"  # training now: a running job, or a live local process (its owner file)
REQUEUED = "requeued"  # preempted or requeued by the scheduler; resumes from its last checkpoint
DONE = "done"  # DONE marker: trained max_steps steps
DIVERGED = "diverged"  # DIVERGED marker: loss, reward or grad_norm became NaN/inf
FAILED = "failed"  # FAILED marker (the run raised), or its job ended in a scheduler failure
STOPPED = "stopped"  # started, not finished, nothing runs it: interrupted, killed or cancelled; resumable
RUN_STATES = (PENDING, QUEUED, RUNNING, REQUEUED, DONE, DIVERGED, FAILED, STOPPED)
#: The files a run writes through :func:`atomic_path` into its own folder.
_RUN_FILES = (
    CONFIG_FILE,
    PROVENANCE_FILE,
    SAMPLES_FILE,
    DS_LOG_FILE,
    DONE_FILE,
    DIVERGED_FILE,
    FAILED_FILE,
    OWNER_FILE,
    PROGRESS_FILE,
    START_EVAL_FILE,
    EVAL_SAMPLES_FILE,
)


def run_dir(grid_dir: str | Path, run_id: str) -> Path:
    """Folder of one run inside a grid's results folder."""
    return Path(grid_dir) / RUNS_DIR / run_id


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


#: Mode of files written through a temporary file (``tempfile.mkstemp`` creates them 0600): what
#: ``open()`` would give under this process's umask, so colleagues can read a shared results folder.
FILE_MODE = _file_mode()


@contextlib.contextmanager
def atomic_path(path: str | Path, prefix: str | None = None) -> Iterator[str]:
    """A temporary file name in ``path``'s folder to write to; when the block ends it is given
    :data:`FILE_MODE` and renamed to ``path`` (``os.replace``), or removed if the block raised.

    A process killed at any moment leaves either the old file or the new one, never a torn one,
    and readers skip the temporary (its name starts with "."). No fsync: surviving a power cut is
    not promised, and a fsync per job record made submitting 1,000 runs seconds slower.

    Args:
        path: the file to write; its folder is created if missing.
        prefix: the temporary's name prefix (default ``".<name>."``).

    Raises:
        OSError: the folder cannot be made or written, or the rename fails.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_temporaries(folder: str | os.PathLike) -> list[str]:
    """Delete the temporaries :func:`atomic_path` left in ``folder`` when a kill came between
    writing and renaming (``.<name>.<random>``, where ``<name>`` is a file of the layout or a
    metrics part); only the process that owns the run calls it. Returns the names deleted."""
    known = (*_RUN_FILES, COMPACT_FILE, PART_PREFIX)
    deleted = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return deleted
    for entry in entries:
        name = entry.name
        if name.startswith(".") and any(name[1:].startswith(k) for k in known) and entry.is_file():
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                deleted.append(name)
    return deleted


def metric_paths(run_dir: str | os.PathLike) -> list[str]:
    """The parquet files holding a run's metrics, in reading order: ``metrics/metrics.parquet``
    alone when the run was compacted, otherwise its ``part-*.parquet`` files in name order (a later
    part wins on a repeated step); names starting with "." (a writer's temporaries) never.
    Plain strings and one stat per compacted run: this runs once per run on every load."""
    mdir = os.path.join(run_dir, METRICS_DIR)
    compact = os.path.join(mdir, COMPACT_FILE)
    if os.path.isfile(compact):
        return [compact]
    return part_paths(mdir)


def part_paths(mdir: str | os.PathLike) -> list[str]:
    """A metrics folder's ``part-*.parquet`` files in name order (empty when it cannot be listed)."""
    try:
        names = os.listdir(mdir)
    except OSError:
        return []
    return [
        os.path.join(mdir, n) for n in sorted(names) if n.startswith(PART_PREFIX) and n.endswith(".parquet")
    ]


def read_grid(grid_dir: str | os.PathLike) -> dict | None:
    """The grid's ``grid.json`` (name, source, profile, overrides, run_ids, varying, runs, report),
    or None when there is none.

    Raises:
        ValueError: the file exists but cannot be read, is not valid JSON (or UTF-8), or is not a
            JSON object.
    """
    path = os.path.join(grid_dir, GRID_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError) as e:  # ValueError covers bad JSON and bad UTF-8
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(info, dict):
        raise ValueError(f"{path}: not a JSON object")
    return info


def read_progress(run_dir: str | os.PathLike) -> dict | None:
    """The run's ``progress.json`` (written by rank 0 at most every ``PROGRESS_EVERY_S`` seconds of
    :mod:`harness.train.training`, and on its first and last step and before each checkpoint): ``step``,
    ``max_steps``, ``reward`` (latest, or None), ``s_per_step`` (mean wall seconds of the recent
    steps, eval time excluded), ``updated_at`` (Unix seconds); None when there is none."""
    info = read_json_object(os.path.join(run_dir, PROGRESS_FILE))
    return info if info is not None and isinstance(info.get("step"), int) else None


def read_phase(run_dir: str | os.PathLike) -> dict | None:
    """What the run's ``progress.json`` says it does before its first optimizer step (written by
    rank 0 of :mod:`harness.train.phases`): ``phase`` (the words: ``building model tiny-steps: SFT
    step 340/1500, ETA 0:06:10``), ``kind`` (one of :data:`PHASES`), ``since`` (when the phase
    began) and ``updated_at`` (Unix seconds); None once it has a step (:func:`read_progress`) or
    has no such file."""
    info = read_json_object(os.path.join(run_dir, PROGRESS_FILE))
    if info is None or isinstance(info.get("step"), int) or not isinstance(info.get("phase"), str):
        return None
    return info


def read_start_eval(run_dir: str | os.PathLike) -> float | None:
    """The starting policy's greedy accuracy from the run's :data:`START_EVAL_FILE`; None when the
    run has none (eval off, recorded before the file existed, or not yet measured) or the file
    cannot be read or holds no finite number."""
    return read_start_evals(run_dir).get(EVAL_ACCURACY)


def read_start_evals(run_dir: str | os.PathLike) -> dict[str, float]:
    """Every eval metric (:func:`is_eval_metric`: greedy and sampled accuracy, pass@k) of the run's
    :data:`START_EVAL_FILE` that holds a finite number, ``{name: value}``; empty when the run has no
    such file or it cannot be read."""
    info = read_json_object(os.path.join(run_dir, START_EVAL_FILE)) or {}
    return {
        k: float(v)
        for k, v in info.items()
        if is_eval_metric(k) and not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
    }


def read_attempts(run_dir: str | os.PathLike) -> list[dict]:
    """The run's attempts, oldest first, from ``attempts.jsonl``: each start record (``started_at``,
    host, SLURM ids, ``resume_from_step``, damaged checkpoints passed over) merged with the end
    record the attempt wrote (``ended_at``, ``outcome``: done, stopped, diverged, failed or
    interrupted, and ``detail``); an attempt that was killed has no end record. Lines that do not
    parse (cut by a kill) are passed over."""
    try:
        with open(os.path.join(run_dir, ATTEMPTS_FILE), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    attempts: list[dict] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if "started_at" in record or not attempts:
            attempts.append(record)
        else:
            attempts[-1].update(record)
    return attempts


#: Free bytes below which the disk holding a run counts as full when an error ends it.
FULL_BELOW_BYTES = 1 << 20


def disk_full(path: str | os.PathLike) -> bool:
    """Whether the disk holding ``path`` has under :data:`FULL_BELOW_BYTES` free."""
    try:
        return shutil.disk_usage(path).free < FULL_BELOW_BYTES
    except OSError:
        return False


def unwritable(folder: str | os.PathLike) -> str | None:
    """Why results cannot be written into ``folder`` (made if missing), or None when they can.

    Walks up to the nearest folder that exists and creates (then removes) a temporary file there,
    so nothing is left behind either way: a file where a folder should be, a read-only mount,
    a folder without write permission, or a place like ``/proc`` that holds no files.
    """
    path = Path(os.path.abspath(folder))
    for p in (path, *path.parents):
        if not p.exists():
            continue
        if not p.is_dir():
            return f"{p} is a file, not a folder"
        try:
            fd, tmp = tempfile.mkstemp(prefix=".write-check.", dir=p)
        except OSError as e:
            return f"{p} cannot be written ({e.strerror or e})"
        os.close(fd)
        os.unlink(tmp)
        return None
    return f"no folder above {path} exists"


def write_grid(grid_dir: str | os.PathLike, record: dict) -> None:
    """Write ``grid.json`` (:func:`harness.config.grid.plan_record`) atomically, creating the folder."""
    with atomic_path(os.path.join(grid_dir, GRID_FILE)) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True, default=str)
        f.write("\n")


def read_json_object(path: str | os.PathLike) -> dict | None:
    """A JSON object file's content; None when it is missing, unreadable, not JSON or not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):  # ValueError covers bad JSON and bad UTF-8
        return None
    return obj if isinstance(obj, dict) else None


def owner_alive(run_dir: str | os.PathLike) -> bool:
    """Whether a process trains the run now: its owner file (``{"host", "pid"}``, written while a
    run trains and removed at exit) names one, and on this host that process still holds the run's
    lock (:data:`RUN_LOCK_FILE`, a ``flock`` the kernel releases when its holder dies: a killed
    owner, a zombie or a recycled pid holds nothing). A process on another host cannot be checked:
    the file is trusted."""
    import socket

    owner = read_json_object(os.path.join(run_dir, OWNER_FILE))
    if owner is None:
        return False
    pid = owner.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if owner.get("host") != socket.gethostname():
        return True
    return lock_held(os.path.join(run_dir, RUN_LOCK_FILE))


def lock_held(path: str | os.PathLike) -> bool:
    """Whether some process (this one included, through another open file) holds an exclusive
    ``flock`` on ``path``; False when the file is missing. Probes with a non-blocking lock, released
    at once."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # a filesystem without flock: nobody can hold it
    finally:
        os.close(fd)  # closing releases the probe's own lock
    return False


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host lives. A zombie does not: a killed process whose parent
    died too stays one until init reaps it, which a container's init may never do, and it holds no
    lock and trains nothing. Another user's live process does."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.AccessDenied:
        return True
    except (psutil.NoSuchProcess, OverflowError, ValueError):
        return False


def trained_elsewhere(run_dir: str | os.PathLike) -> str:
    """Which process trains a run now, as words: "being trained by another process (host vm, pid
    123)", from its owner file (the host and pid are left out when the file is gone)."""
    owner = read_json_object(os.path.join(run_dir, OWNER_FILE)) or {}
    who = f" (host {owner.get('host')}, pid {owner.get('pid')})" if owner else ""
    return f"being trained by another process{who}"


def files_state(run_dir: str | os.PathLike) -> str:
    """A run's state from its own files alone (no scheduler asked): ``DONE``, ``DIVERGED`` or
    ``FAILED`` by its marker (in that order), else ``RUNNING`` while its owner process lives,
    ``STOPPED`` once it started (``config.json``) and ``PENDING`` before."""
    for marker, state in ((DONE_FILE, DONE), (DIVERGED_FILE, DIVERGED), (FAILED_FILE, FAILED)):
        if os.path.exists(os.path.join(run_dir, marker)):
            return state
    if owner_alive(run_dir):
        return RUNNING
    return STOPPED if os.path.exists(os.path.join(run_dir, CONFIG_FILE)) else PENDING


def code_commit() -> tuple[str | None, bool | None]:
    """The git commit of the checkout this package runs from, and whether it has uncommitted
    changes to tracked files: ``(commit, dirty)``; ``(None, None)`` outside git (or without git)."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args],
                cwd=os.path.dirname(os.path.abspath(__file__)),
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


# --------------------------------------------------------------------------------------------------
# Writing files atomically, reading a run's metrics


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`harness.atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(Path(path), (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def read_metrics(run_dir: str | Path, unreadable: list[Path] | None = None) -> pa.Table | None:
    """All metric rows of one run, one row per step (a later part wins on a repeated step).

    Reads ``metrics.parquet`` when the run was compacted, otherwise its parts in name order.
    Returns None when the run has no readable metrics. Raises nothing for unreadable parts: they
    are skipped (the writer never leaves one, but a disk can) and appended to ``unreadable``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [Path(p) for p in metric_paths(run_dir)]
    tables = []
    for f in files:
        try:
            tables.append(pq.read_table(f))
        except (pa.ArrowInvalid, OSError):
            if unreadable is not None:
                unreadable.append(f)
            continue
    if not tables:
        return None
    table = pa.concat_tables(tables, promote_options="permissive")
    return _dedupe_steps(table)


def last_step_and_reward(run_dir: str | Path) -> tuple[int | None, float | None]:
    """The run's last logged step and its latest logged ``reward`` (TRL logs reward only on the steps
    that generate, so the last row may have none); (None, None) without metrics."""
    import pyarrow as pa

    try:
        table = read_metrics(run_dir)
    except (pa.ArrowException, ValueError, KeyError):  # clashing parts, no step column: nothing to show
        return None, None
    if table is None or not table.num_rows or STEP not in table.column_names:
        return None, None
    reward = None
    if "reward" in table.column_names:
        values = [v for v in table.column("reward").to_pylist() if isinstance(v, int | float)]
        reward = float(values[-1]) if values else None
    step = table.column(STEP)[-1].as_py()
    return (step if isinstance(step, int) else None), reward


def final_reward(run_dir: str | Path) -> tuple[float, int] | None:
    """The run's final reward as the report scores it, and over how many logged points: the mean
    of its last ``ceil(n / 10)`` logged rewards (the report smooths each run by a trailing mean
    over a tenth of its points, so its last point is this); None without rewards."""
    import pyarrow as pa

    try:
        table = read_metrics(run_dir)
    except (pa.ArrowException, ValueError, KeyError):
        return None
    if table is None or "reward" not in table.column_names:
        return None
    values = [
        v for v in table.column("reward").to_pylist() if isinstance(v, int | float) and math.isfinite(v)
    ]
    if not values:
        return None
    w = math.ceil(len(values) / 10)
    return sum(values[-w:]) / w, w


def _dedupe_steps(table: pa.Table) -> pa.Table:
    import pyarrow as pa

    steps = table.column(STEP).to_pylist()
    last = {s: i for i, s in enumerate(steps)}
    keep = sorted(last.values(), key=lambda i: steps[i])
    return table.take(pa.array(keep, pa.int64()))
