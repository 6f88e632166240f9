"""Helpers shared by the test files (no test file imports another one): fast settings of the tiny
models, the CLI in a subprocess, the SLURM skip-or-fail rule, and the specs and checks several test
files build on. Synthetic results for the analysis tests are in ``analysis_helpers.py``; the
fault-injection script that ``test_faults.py`` starts is ``fault_inject.py``."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster import preload
from harness.settings.runs import RunSpec

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

#: Fixtures that build a model (conftest's ``tiny_model``; ``tiny_dir`` of test_models.py, ``chat_dir``
#: of test_tiny_chat.py) or hold the models that CLI runs build (``model_cache``): conftest marks slow
#: every test that uses one, so the fast tier leaves it out.
MODEL_FIXTURES = frozenset({"tiny_model", "model_cache", "tiny_dir", "chat_dir"})


def require_cluster(reason: str | None, *, in_ci: str, otherwise: str) -> None:
    """At a SLURM test module's top: nothing when ``reason`` is None (the cluster is there); else fail
    under CI=true (``in_ci``: CI starts the cluster, so a missing one is a fault) or skip the module
    (``otherwise``, with the command that starts it)."""
    if not reason:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(in_ci, pytrace=False)
    pytest.skip(otherwise, allow_module_level=True)


#: What the test session's preloaded interpreter imports: a run's modules, the CLI's and the report's.
SESSION_PRELOAD = (*preload.PRELOAD, "harness.cli", "analysis.report")
_session = contextlib.ExitStack()
atexit.register(_session.close)
#: The environment the interpreter imports in: this process's at its start, not that of the test
#: that happens to need it first (a variable a test sets could be read at some library's import).
_START_ENV = dict(os.environ)


@functools.cache
def _session_socket() -> str | None:
    """The socket of this test process's preloaded interpreter (:mod:`harness.cluster.preload`),
    started at the first call and ended with the process; None where preloading is off
    (``GRPO_HARNESS_NO_PRELOAD=1``) or the interpreter could not start. It is not put in this
    process's environment: only the command lines of :func:`harness_command` use it."""
    if not preload.wanted(False, 2):
        return None
    now = dict(os.environ)
    os.environ.clear()
    os.environ.update(_START_ENV)
    try:
        _session.enter_context(preload.serving(True, modules=SESSION_PRELOAD))
        return os.environ.get(preload.SOCKET_ENV)
    finally:
        os.environ.clear()
        os.environ.update(now)


def as_a_terminal_starts_it() -> None:
    """``preexec_fn`` of a command a test stops with SIGINT, as a terminal's Ctrl-C would: SIGINT at
    its default in the new process. A process started with SIGINT ignored (a background job of a
    non-interactive shell, as CI may start the suite) passes that on to every process it starts,
    and the preloaded interpreter's client then keeps the command's SIGINT ignored, as it would be
    had the command run there (harness.cluster.preload)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def module_command(module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``python -m MODULE ARGS``, forked from the session's
    preloaded interpreter (:func:`_session_socket`) as a local run is: the command's process and
    what it does are those of a plain start, less the imports (about 13 CPU-seconds for the CLI and
    15 for a run's preloaded interpreter here, which a ``run`` it starts uses too). The tests'
    folder is on the module's import path (``fault_inject``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tests"), env.get("PYTHONPATH")]))
    socket = _session_socket()
    if socket is None:
        return [sys.executable, "-m", module, *args], env
    env[preload.SOCKET_ENV] = socket
    return [sys.executable, "-m", "harness.cluster.preload", "-m", module, *args], env


def harness_command(*args: str) -> tuple[list[str], dict[str, str]]:
    """``python -m harness ARGS`` as :func:`module_command` starts it."""
    return module_command("harness", *args)


def cli(*args: str, cwd: Path | None = None, check: bool = True, timeout: int = 900):
    """Run ``python -m harness ARGS`` in a subprocess (:func:`harness_command`); returns the
    CompletedProcess."""
    command, env = harness_command(*args)
    proc = subprocess.run(
        command,
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


def make_spec(tiny_model, chain_sum_task, **trainer) -> RunSpec:
    """A 4-step run of the session's tiny model (``tiny_model``) on ``chain_sum_task``; ``trainer``
    overrides GRPOConfig fields."""
    config = {
        "seed": 0,
        "model": tiny_model,
        "task": {"name": chain_sum_task.name, "kwargs": dict(chain_sum_task.kwargs), "train_size": 256},
        "harness": {"device": "cpu", "eval_steps": 0, "samples_steps": 0},
        "trainer": {
            "max_steps": 4,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 6,
            "learning_rate": 1e-3,
            "loss_type": "grpo",
            **trainer,
        },
    }
    config["trainer"]["seed"] = 0
    return RunSpec(grid="t", settings=config)


def tracker_spec(report_to: list[str], model_cache: Path | None) -> RunSpec:
    """A 4-step dapo run of a small ``tiny`` model reporting to ``report_to``, checkpointed every
    2 steps, in grid ``trk`` (sub-grid ``clip``)."""
    settings = {
        "seed": 1,
        "model": "tiny",
        "tiny": {"sft_steps": 4, "sft_examples": 64},
        "task": {
            "name": "chain_sum",
            "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1},
            "train_size": 64,
            "eval_size": 16,
        },
        "harness": {"device": "cpu", "eval_steps": 0, "samples_steps": 0, "checkpoint_steps": 2},
        "trainer": {
            "max_steps": 4,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 6,
            "num_iterations": 2,
            "loss_type": "dapo",
            "report_to": report_to,
            "seed": 1,
        },
    }
    varying = {"trainer.loss_type": "dapo", "trainer.epsilon_high": 0.28, "seed": 1}
    return RunSpec(grid="trk", settings=settings, varying=varying, subgrid="clip")


def train_stopped_then_resumed(spec: RunSpec, root: Path) -> Path:
    """Stop the run after step 2 (a checkpoint), then train it again: it resumes at step 2."""
    from harness.train.training import train

    run_dir = root / spec.grid / "runs" / spec.run_id
    calls = []
    assert train(spec, run_dir, stop_requested=lambda: calls.append(1) or len(calls) >= 2)["steps"] == 2
    assert train(spec, run_dir)["resumed_from"] == 2
    return run_dir


def assert_whole_reference(path: Path, model_dir: str) -> None:
    """``ref_model.pt`` holds every tensor of the model whole (the shapes of the model's own
    safetensors, not one rank's shard: a ZeRO-3 shard is an empty placeholder or a flat slice)."""
    import torch
    from safetensors import safe_open

    saved = torch.load(path, map_location="cpu", weights_only=True)
    with safe_open(str(Path(model_dir) / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    assert {k: tuple(v.shape) for k, v in saved.items() if k in shapes} == shapes
    assert all(v.numel() > 0 and torch.isfinite(v).all() for v in saved.values())
