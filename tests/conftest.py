"""Shared fixtures: a tiny model built once per session, and fast settings for end-to-end runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Before torch is imported here or in any subprocess (OpenMP reads it when it loads): OpenMP threads
# sleep instead of spinning while they wait. The two test processes run builds and two-process runs
# that use more threads than cores are free, where spinning took a third of the CPU time
# (benchmarks/omp_wait_policy.py); it changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The test processes keep what they compile (the test modules as pytest rewrites them, the project's
# modules) in __pycache__ even where PYTHONDONTWRITEBYTECODE is set, as it is on some machines: else
# each of them compiles every test module anew at collection, about 10 CPU-seconds a process here.
# The commands the tests start keep the environment's setting.
sys.dont_write_bytecode = False

import pytest  # noqa: E402
from helpers import FAST_TINY, MODEL_FIXTURES  # noqa: E402
from scheduling import make_scheduler, unit_of  # noqa: E402

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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before ``-m`` selects: mark slow every test that uses a model fixture (helpers.MODEL_FIXTURES),
    directly or through another fixture, and every SLURM test, so the fast tier
    (``pytest -m "not slow"``) leaves them out. The suite's two test processes take whole modules
    (:func:`scheduling.make_scheduler`), so a module-scoped fixture is made once; a SLURM test
    outside :data:`SLURM_MODULES` is refused."""
    for item in items:
        if item.get_closest_marker("slurm") or MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slurm") and unit_of(item.nodeid) != "slurm":
            raise pytest.UsageError(
                f"{item.nodeid}: a slurm test outside SLURM_MODULES (tests/scheduling.py); add its module there"
            )


def pytest_addoption(parser):
    parser.addoption(
        "--module-seconds",
        metavar="PATH",
        help="write each scheduling unit's seconds (setup + call + teardown of its tests) to PATH as JSON",
    )


#: Seconds per unit of this session, kept by the controlling process where --module-seconds asks.
SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    unit = unit_of(report.nodeid)
    SECONDS[unit] = SECONDS.get(unit, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = session.config.getoption("--module-seconds")
    if path and not hasattr(session.config, "workerinput"):
        ordered = sorted(SECONDS.items(), key=lambda kv: -kv[1])
        Path(path).write_text(json.dumps({k: round(v, 1) for k, v in ordered}, indent=1) + "\n")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadscope`` (pyproject.toml): :func:`scheduling.make_scheduler`."""
    return make_scheduler(config, log)


@pytest.fixture(scope="session", autouse=True)
def verdict_memo(tmp_path_factory) -> Path:
    """A session-private memo of TRL/reasoning-gym verdicts (harness.verdicts), shared with subprocesses."""
    path = tmp_path_factory.mktemp("verdicts")
    os.environ["GRPO_HARNESS_VERDICTS"] = str(path)
    return path


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """One model cache for the whole session, its test processes together (a build takes the
    cache's file lock, so one process builds a model and the other waits for it); CLI subprocesses
    find it through the environment."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "model-cache"  # the session's, not the process's
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("model-cache")
    os.environ["GRPO_HARNESS_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def chain_sum_task():
    from harness.models.tasks import TaskSpec

    return TaskSpec(
        name="chain_sum",
        kwargs={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        train_size=256,
        eval_size=200,
    )


@pytest.fixture(scope="session")
def tiny_model(model_cache, chain_sum_task) -> str:
    """Path of a tiny model with a short warm start (built once, cached for the session)."""
    from harness.models.tiny import TinyModelSpec, tiny_model_path

    return str(tiny_model_path(TinyModelSpec(**FAST_TINY), chain_sum_task, model_cache))


@pytest.fixture
def clean_registry():
    """Registered plugins and imported plugin modules are process-wide: put them back after a test."""
    import sys

    from harness import losses, rewards
    from harness.rewards import builtin  # noqa: F401  (registered before the snapshot)

    # The built-in rewards register when harness.rewards.builtin is first imported. Imported first
    # inside this fixture, the module would be popped below and the registry put back without them,
    # while `from harness.rewards import builtin` still finds the package's attribute and imports
    # nothing: every later test of the process would see no reward at all.
    saved, modules = dict(losses.REGISTRY), set(sys.modules)
    saved_rewards = dict(rewards.REGISTRY)
    yield
    losses.REGISTRY.clear()
    losses.REGISTRY.update(saved)
    rewards.REGISTRY.clear()
    rewards.REGISTRY.update(saved_rewards)
    for name in set(sys.modules) - modules:
        if not name.startswith(("torch", "trl", "transformers")):
            sys.modules.pop(name, None)
