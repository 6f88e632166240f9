"""Shared fixtures: a tiny model built once per session, and fast settings for end-to-end runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import FAST_TINY, MODEL_FIXTURES

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
    (:func:`pytest_xdist_make_scheduler`), so a module-scoped fixture is made once; a SLURM test
    outside :data:`SLURM_MODULES` is refused."""
    for item in items:
        if item.get_closest_marker("slurm") or MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slurm") and item.nodeid.split("::", 1)[0] not in SLURM_MODULES:
            raise pytest.UsageError(
                f"{item.nodeid}: a slurm test outside SLURM_MODULES (tests/conftest.py); add its module there"
            )


#: The modules of the SLURM tests. They share one cluster (its partitions, its preemption), so the
#: two test processes take them as one unit and run them one after another.
SLURM_MODULES = ("tests/test_slurm.py", "tests/test_multinode.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadscope`` (pyproject.toml): each test module whole to one test process, the
    SLURM modules together as one unit. (xdist's ``--dist loadgroup`` would express this with marks,
    but groups nothing under pytest 9.2, whose node ids no longer take xdist's group suffix.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "slurm" if module in SLURM_MODULES else module

    return ModuleScheduling(config, log)


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
