"""How a run ends: one module (``harness.train.ending``) writes every marker and every record of the
attempts log, read from the source; what it makes of an exception (by type and errno) and of the
text a driver gets from submitit; its markers and end records."""

from __future__ import annotations

import ast
import errno
import json
from pathlib import Path

import pytest

from harness import layout
from harness.train import ending

ROOT = Path(__file__).resolve().parents[1]
OWNER = "harness.train.ending"
#: The files that tell how a run ended, by their names in harness.layout.
ENDING_FILES = ("DONE_FILE", "DIVERGED_FILE", "FAILED_FILE", "ATTEMPTS_FILE")
#: Calls that only read the path they are given (or that a method is called on).
READERS = {"read_json_object", "exists", "is_file", "read_text", "read_bytes", "stat", "read_attempts"}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _read_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether the nearest call around ``node`` (within its statement) only reads it: a reader, or
    ``open`` with a mode that cannot write."""
    while node in parents and not isinstance(node, ast.stmt):
        node = parents[node]
        if isinstance(node, ast.Call):
            name = _called(node)
            if name == "open":
                mode = node.args[1] if len(node.args) > 1 else None
                return mode is None or (isinstance(mode, ast.Constant) and set(mode.value) <= set("rbt"))
            return name in READERS
    return False  # bound to a name, or passed on: it may be written anywhere


def _ending_mentions() -> dict[str, dict[str, bool]]:
    """Per module of ``harness`` (layout, which names and reads them, aside): each ending file it
    names, and whether every mention is one a reader takes."""
    found: dict[str, dict[str, bool]] = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module == "harness.layout":
            continue
        tree = ast.parse(path.read_text())
        parents = _parents(tree)
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if name in ENDING_FILES:
                read = _read_only(node, parents)
                found.setdefault(module, {})[name] = found.get(module, {}).get(name, True) and read
    return found


def test_one_module_writes_every_ending_marker_and_the_attempts_log():
    mentions = _ending_mentions()
    writers = {m for m, names in mentions.items() if not all(names.values())}
    assert writers == {OWNER}, f"modules that write a run's ending besides {OWNER}: {writers - {OWNER}}"
    written = {name for name, read in mentions[OWNER].items() if not read}
    assert written == set(ENDING_FILES)


def test_an_exception_is_told_by_its_type_and_errno(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "disk_full", lambda path: False)
    told = {
        ending.RunDiverged("run r diverged at step 3: loss is nan"): ending.DIVERGED,
        KeyboardInterrupt(): ending.INTERRUPTED,
        OSError(errno.ENOSPC, "No space left on device"): ending.NO_SPACE,
        OSError(errno.EDQUOT, "Disk quota exceeded"): ending.NO_SPACE,
        RuntimeError("No space left on device"): ending.FAILED,  # words alone say nothing here
        ValueError("bad value\nsecond line"): ending.FAILED,
    }
    for e, outcome in told.items():
        assert ending.classify(e, tmp_path).outcome == outcome, e
    assert ending.classify(ValueError("bad value\nsecond line"), tmp_path).detail == "ValueError: bad value"
    monkeypatch.setattr(layout, "disk_full", lambda path: True)  # torch's "unexpected pos" on a full disk
    assert ending.classify(RuntimeError("unexpected pos 64"), tmp_path).outcome == ending.NO_SPACE


def test_a_drivers_text_is_read_only_where_the_exception_is_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "disk_full", lambda path: False)
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nOSError: [Errno 28] No space left on device\n'
    assert ending.job_error(trace, tmp_path) == ending.Ending(
        ending.NO_SPACE, "OSError: [Errno 28] No space left on device"
    )
    assert ending.job_error("Traceback:\nValueError: bad\n", tmp_path) == ending.Ending(
        ending.FAILED, "ValueError: bad"
    )
    assert ending.job_error("Job 1 (task: 0) with path x has not produced any output", tmp_path) is None
    assert ending.job_error(OSError(errno.ENOSPC, "full"), tmp_path).outcome == ending.NO_SPACE
    diverged = ending.job_error(ending.RunDiverged("run r diverged"), tmp_path)
    assert diverged == ending.Ending(ending.FAILED, "RunDiverged: run r diverged")


def test_the_failed_marker_is_left_only_by_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "disk_full", lambda path: False)
    assert not ending.mark_failed(tmp_path, ending.RunDiverged("diverged"), "log")
    assert not ending.mark_failed(tmp_path, OSError(errno.ENOSPC, "full"), "log")
    assert layout.files_state(tmp_path) == layout.PENDING
    try:
        raise ValueError("bad value")
    except ValueError as e:
        assert ending.mark_failed(tmp_path, e, "/logs/0_log.err")
    marker = json.loads((tmp_path / layout.FAILED_FILE).read_text())
    assert marker["error"] == "ValueError: bad value" and marker["log"] == "/logs/0_log.err"
    assert "Traceback" in marker["traceback"] and 'raise ValueError("bad value")' in marker["traceback"]
    assert layout.files_state(tmp_path) == layout.FAILED
    ending.mark_done(tmp_path, {"run_id": "r", "steps": 4})
    ending.clear_markers(tmp_path)
    assert not (tmp_path / layout.FAILED_FILE).exists() and ending.finished(tmp_path)["steps"] == 4


def test_a_missing_end_record_is_written_once_and_only_after_a_start(tmp_path):
    ending.record_missing_end(tmp_path, "nothing started")
    assert not (tmp_path / layout.ATTEMPTS_FILE).exists()
    ending.record_start(tmp_path, {"started_at": "t0"})
    assert not ending.attempt_ended(tmp_path)
    ending.record_missing_end(tmp_path, "by a second SIGINT", ending.FORCED)
    ending.record_missing_end(tmp_path, "seen again")
    (attempt,) = layout.read_attempts(tmp_path)
    assert attempt["outcome"] == ending.FORCED and attempt["detail"] == "by a second SIGINT"
    assert ending.attempt_ended(tmp_path)
    ending.record_start(tmp_path, {"started_at": "t1"})
    assert ending.record_failure(tmp_path, KeyboardInterrupt()).outcome == ending.INTERRUPTED
    assert [a["outcome"] for a in layout.read_attempts(tmp_path)] == [ending.FORCED, ending.INTERRUPTED]


@pytest.mark.parametrize("e", [OSError(errno.ENOSPC, "full"), ValueError("x")])
def test_an_end_record_never_raises_on_a_folder_it_cannot_write(tmp_path, e):
    missing = tmp_path / "gone"
    assert ending.record_failure(missing, e).outcome in (ending.NO_SPACE, ending.FAILED)
    assert not missing.exists()


def test_a_driver_tells_an_ending_its_attempt_could_not_write(tmp_path, monkeypatch):
    """The debug executor hands the exception itself, a local job submitit's text of it: both are
    told apart by ``job_error``, and neither is said twice in the attempts log."""
    from harness.cluster.executors import outcome_of

    monkeypatch.setattr(layout, "disk_full", lambda path: False)
    (tmp_path / layout.CONFIG_FILE).write_text("{}")
    ending.record_start(tmp_path, {"started_at": "t0"})
    full = outcome_of("r", tmp_path, raised=OSError(errno.ENOSPC, "No space left on device"))
    assert full.state == layout.STOPPED
    assert full.error.startswith(
        "no space left on device (OSError: [Errno 28] No space left on device); free"
    )
    assert outcome_of("r", tmp_path, raised="Traceback:\nValueError: bad\n").state == layout.FAILED
    assert outcome_of("r", tmp_path, raised=ValueError("bad")).error == "ValueError: bad"
    assert not ending.attempt_ended(tmp_path)
    killed = outcome_of("r", tmp_path, raised="Job 1 (task: 0) has not produced any output")
    assert killed.state == layout.STOPPED and layout.read_attempts(tmp_path)[-1]["outcome"] == ending.KILLED
