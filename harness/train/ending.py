"""How a run ends: the one module that writes a run's ending into its folder, and says what ended it.

A run's ending is told by two kinds of record, both written here and nowhere else:

- its marker, JSON written atomically: ``DONE`` (:func:`mark_done`), ``DIVERGED``
  (:func:`mark_diverged`), ``FAILED`` (:func:`mark_failed`); a new attempt clears the last two
  (:func:`clear_markers`). :func:`harness.layout.files_state` is the one reader of a run's state
  from them;
- the attempts log (``attempts.jsonl``, read by :func:`harness.layout.read_attempts`): the start
  record of each attempt (:func:`record_start`) and its end record, written by the attempt itself
  (:func:`record_end`, :func:`record_failure`: done, stopped, diverged, failed, no space,
  interrupted) or, when its process had no moment to write one, by whoever saw its job end
  (:func:`record_missing_end`: killed, stopped at once, ended by the scheduler).

Callers: :mod:`harness.train.training` (each attempt's start and end, DONE, DIVERGED, the markers
of an earlier attempt cleared), :mod:`harness.cluster.executors` (FAILED, the end of a job whose
attempt could not say it), :mod:`harness.cluster.slurm` (a job the scheduler ended; the markers of
a run submitted again cleared).

What ended an attempt is read from the exception by its type and errno (:func:`classify`). Words
are read only where text is all there is: the error a submitit job re-raised in the driver's
process, and a FAILED marker's error line (:func:`job_error`, :func:`says_no_space`).

Imports nothing of the project but :mod:`harness.layout`, and nothing heavy, so a driver that
never trains can take it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import layout

#: The outcomes of the attempts log's end records. An attempt writes its own: it trained every step
#: (DONE), stopped on request with a checkpoint, or before its first step (STOPPED), diverged,
#: raised (FAILED), stopped on a full disk or quota (NO_SPACE: resumable once space is freed), or
#: was interrupted in the driver's own process (INTERRUPTED).
DONE, STOPPED, DIVERGED, FAILED = "done", "stopped", "diverged", "failed"
NO_SPACE, INTERRUPTED = "no-space", "interrupted"
#: The end records a driver or ``submit`` writes for an attempt that wrote none: its process ended
#: without a word (KILLED: a SIGKILL, the out-of-memory killer, a lost machine), a second Ctrl-C or
#: SIGTERM to a local ``run`` killed it (FORCED), or the scheduler ended its job (BY_SCHEDULER).
KILLED, FORCED, BY_SCHEDULER = "killed", "stopped at once", "ended by the scheduler"

#: What an error's text says when the disk or the quota is full (errno 28 ENOSPC, 122 EDQUOT):
#: read only where the exception itself is gone (:func:`says_no_space`).
NO_SPACE_WORDS = ("No space left on device", "Errno 28", "Disk quota exceeded", "Errno 122")
#: submitit's words, in the error it re-raises, for a task that ended without a result or an
#: error: its process was killed.
_NO_OUTPUT = "has not produced any output"


class RunDiverged(RuntimeError):
    """Loss, reward or grad_norm became NaN or infinite; the run stopped and left a DIVERGED marker."""


@dataclass(frozen=True)
class Ending:
    """How an attempt ended: ``outcome``, one of the end records' outcomes above, and ``detail``,
    one line (at most 500 characters) that says what happened."""

    outcome: str
    detail: str


def no_space(e: BaseException, run_dir: str | Path) -> bool:
    """Whether ``e`` ended the attempt because the disk (or quota) is full: an ``OSError`` whose
    errno says so (ENOSPC, EDQUOT), or any error while the disk holding ``run_dir`` is full
    (:func:`harness.layout.disk_full`; torch's checkpoint writer reports a full disk as
    ``RuntimeError: ... unexpected pos``). A stop, not a failure of the run: it resumes once space
    is freed."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return layout.disk_full(run_dir)


def says_no_space(text: str) -> bool:
    """Whether an error's text says the disk or the quota is full (:data:`NO_SPACE_WORDS`). The
    fallback where only text is left: an error re-raised by submitit in the driver, a FAILED
    marker's error line; where the exception is at hand, :func:`no_space` reads its errno."""
    return any(words in text for words in NO_SPACE_WORDS)


def _first_line(e: BaseException) -> str:
    """``"<Type>: <message>"``'s first line (the type alone for an empty message), cut to 500."""
    lines = f"{type(e).__name__}: {e}".strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:500]


def classify(e: BaseException, run_dir: str | Path) -> Ending:
    """How the exception that ended an attempt ends it, by its type: diverged
    (:class:`RunDiverged`), interrupted (``KeyboardInterrupt``), no space (:func:`no_space`: its
    errno, or a full disk now), else failed; the detail is the error's first line."""
    if isinstance(e, RunDiverged):
        return Ending(DIVERGED, str(e))
    if isinstance(e, KeyboardInterrupt):
        return Ending(INTERRUPTED, "KeyboardInterrupt")
    if no_space(e, run_dir):
        return Ending(NO_SPACE, _first_line(e))
    return Ending(FAILED, _first_line(e))


def last_error_line(text: str) -> str:
    """The last line of a log or traceback that names an error (or the last line); "" for none."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln and not ln.startswith(("File ", "^", "~")) and ("Error" in ln or "Exception" in ln):
            return ln
    return lines[-1] if lines else ""


def job_error(raised: BaseException | str, run_dir: str | Path) -> Ending | None:
    """How a job that raised ended, as its driver got the error, for an attempt that wrote no end
    record (an error before it started, or one that a full disk kept from being written): no space
    or failed; None when nothing says more than that its process was killed.

    The exception itself (the debug executor, which trains in the driver's process) is read by
    :func:`classify`. A local job's error reaches the driver as text only (submitit re-raises it
    from the job's pickled result or its log), so that text is read: no space when its error line
    says so (:func:`says_no_space`) or the disk is full now; failed with its error line; None when
    it is empty or submitit's words for a task killed before it wrote anything.
    """
    if isinstance(raised, BaseException):
        end = classify(raised, run_dir)
        return end if end.outcome == NO_SPACE else Ending(FAILED, _first_line(raised))
    line = last_error_line(raised)
    if says_no_space(line) or (raised and layout.disk_full(run_dir)):
        return Ending(NO_SPACE, line)
    if line and _NO_OUTPUT not in raised:
        return Ending(FAILED, line)
    return None


# --------------------------------------------------------------------------------------------------
# The markers


def finished(run_dir: str | Path) -> dict | None:
    """The DONE marker of a run that trained every step (its summary: ``run_id``, ``steps``,
    ``seconds``, ``resumed_from``, ``device``, ``missing_steps`` when some steps have no metrics);
    None when the run has none.

    Raises:
        ValueError: the marker is not valid JSON.
        OSError: the marker cannot be read.
    """
    done = Path(run_dir) / layout.DONE_FILE
    return json.loads(done.read_text()) if done.exists() else None


def clear_markers(run_dir: str | Path) -> None:
    """Remove the DIVERGED and FAILED markers of an earlier attempt (a run started or submitted
    again); DONE stays, as a finished run is never trained again."""
    for stale in (layout.DIVERGED_FILE, layout.FAILED_FILE):
        (Path(run_dir) / stale).unlink(missing_ok=True)


def mark_done(run_dir: str | Path, summary: dict) -> None:
    """Write the DONE marker: ``summary`` (:func:`finished` says its keys), atomically.

    Raises:
        OSError: the marker cannot be written.
    """
    layout.atomic_write_json(Path(run_dir) / layout.DONE_FILE, summary)


def mark_diverged(run_dir: str | Path, summary: dict, step: int, metric: str, value: Any) -> None:
    """Write the DIVERGED marker: ``summary`` with the optimizer ``step`` whose ``metric`` (loss,
    reward or grad_norm) became ``value`` (NaN or infinite), atomically.

    Raises:
        OSError: the marker cannot be written.
    """
    marker = {**summary, "step": step, "metric": metric, "value": value}
    layout.atomic_write_json(Path(run_dir) / layout.DIVERGED_FILE, marker)


def mark_failed(run_dir: str | Path, e: BaseException, log: str) -> bool:
    """Write the FAILED marker of a run that raised ``e``: its error line, ``log`` (the job's
    stderr) and the traceback's last 4,000 characters; returns whether one was written. None for
    an attempt that did not fail (:func:`classify`): it diverged (its own marker), stopped on a
    full disk (it resumes once space is freed) or was interrupted. Never raises: a full disk must
    not hide the error itself."""
    end = classify(e, run_dir)
    if end.outcome != FAILED:
        return False
    marker = {
        "error": end.detail,
        "log": log,
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:],
    }
    try:
        layout.atomic_write_json(Path(run_dir) / layout.FAILED_FILE, marker)
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------------------------------
# The attempts log


def record_start(run_dir: str | Path, record: dict) -> None:
    """Append an attempt's start record (``started_at``, hosts, SLURM ids, ``resume_from_step``, what
    was passed over) to the attempts log.

    Raises:
        OSError: the log cannot be written.
    """
    with open(Path(run_dir) / layout.ATTEMPTS_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")


def record_end(run_dir: str | Path, outcome: str, detail: str) -> None:
    """Append the end record of the attempt now ending (rank 0): ``ended_at``, ``outcome`` (one of
    this module's outcomes) and one line of ``detail``. Never raises: a full disk must not hide
    the error that ended the attempt."""
    record = {"ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "outcome": outcome, "detail": detail}
    with contextlib.suppress(OSError), open(Path(run_dir) / layout.ATTEMPTS_FILE, "a") as f:
        f.write(json.dumps(record) + "\n")


def record_failure(run_dir: str | Path, e: BaseException) -> Ending:
    """The end record of an attempt that raised ``e``, as :func:`classify` tells it; returns it.
    Never raises."""
    end = classify(e, run_dir)
    record_end(run_dir, end.outcome, end.detail)
    return end


def attempt_ended(run_dir: str | Path) -> bool:
    """Whether the run's last attempt has its end record (False when it has no attempt)."""
    attempts = layout.read_attempts(run_dir)
    return bool(attempts and attempts[-1].get("outcome"))


def record_missing_end(run_dir: str | Path, detail: str, outcome: str = KILLED) -> None:
    """Write the end record of the run's last attempt when it has none (a SIGKILL, or the
    scheduler ending the job, leaves the attempt no moment to write it): ``outcome`` and the one
    line that says what happened, by the driver or ``submit`` that saw the job end. Nothing when
    the attempt wrote its own, or there is no attempt. Never raises."""
    attempts = layout.read_attempts(run_dir)
    if attempts and not attempts[-1].get("outcome"):
        record_end(run_dir, outcome, detail)
