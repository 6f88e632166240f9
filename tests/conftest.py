"""Shared fixtures: a tiny model built once per session, and fast settings for end-to-end runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Fast settings for end-to-end runs: a barely warm-started tiny model and a few short steps.
FAST_TINY = {"sft_steps": 30, "sft_examples": 512}
FAST_OVERRIDES = [f"-o tiny.{k}={v}" for k, v in FAST_TINY.items()]
#: A small task and model fields whose whole build (data, tokenizer, a few SFT steps, save) takes a
#: few seconds: the unit tests of both embedded models build with them.
SMALL_TASK = {
    "name": "chain_sum",
    "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1},
    "train_size": 64,
    "eval_size": 16,
}
SMALL_MODEL = {
    "hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2, "intermediate_size": 64,
    "sft_steps": 4, "sft_batch_size": 16, "sft_examples": 64,
}  # fmt: skip


#: Lines tests report for the session's terminal summary (the ``summary`` fixture).
SUMMARY = pytest.StashKey[list]()


@pytest.fixture
def summary(request):
    """``summary(line)``: print ``line`` and show it, prefixed with the test's name, in a "reported
    values" section at the end of the session's output (``pytest -q`` too, passed or failed), so
    that numbers a reviewer checks can be read from CI logs."""
    lines = request.config.stash.setdefault(SUMMARY, [])

    def add(line: str) -> None:
        print(line)
        lines.append(f"{request.node.name}: {line}")

    return add


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.section("reported values")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def verdict_memo(tmp_path_factory) -> Path:
    """A session-private memo of TRL/reasoning-gym verdicts (harness.verdicts), shared with subprocesses."""
    path = tmp_path_factory.mktemp("verdicts")
    os.environ["GRPO_HARNESS_VERDICTS"] = str(path)
    return path


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """One model cache for the whole session; CLI subprocesses find it through the environment."""
    path = tmp_path_factory.mktemp("model-cache")
    os.environ["GRPO_HARNESS_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def chain_sum_task():
    from harness.tasks import TaskSpec

    return TaskSpec(
        name="chain_sum",
        kwargs={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        train_size=256,
        eval_size=200,
    )


@pytest.fixture(scope="session")
def tiny_model(model_cache, chain_sum_task) -> str:
    """Path of a tiny model with a short warm start (built once, cached for the session)."""
    from harness.models import TinyModelSpec, tiny_model_path

    return str(tiny_model_path(TinyModelSpec(**FAST_TINY), chain_sum_task, model_cache))


def require_cluster(reason: str | None, *, in_ci: str, otherwise: str) -> None:
    """At a SLURM test module's top: nothing when ``reason`` is None (the cluster is there); else fail
    under CI=true (``in_ci``: CI starts the cluster, so a missing one is a fault) or skip the module
    (``otherwise``, with the command that starts it)."""
    if not reason:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(in_ci, pytrace=False)
    pytest.skip(otherwise, allow_module_level=True)


def cli(*args: str, cwd: Path | None = None, check: bool = True, timeout: int = 900):
    """Run ``python -m harness ARGS`` in a subprocess; returns the CompletedProcess."""
    import subprocess

    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
        )
    return proc
