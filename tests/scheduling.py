"""The suite's scheduler under pytest-xdist (tests/conftest.py hands it to xdist): whole units to a
test process, the longest first."""

from __future__ import annotations

import json
from pathlib import Path

#: The modules of the SLURM tests. They share one cluster (its partitions, its preemption), so the
#: test processes take them as one unit and run them one after another.
SLURM_MODULES = ("tests/test_slurm.py", "tests/test_multinode.py")


#: Seconds each unit of the scheduler (a test module, or "slurm" for :data:`SLURM_MODULES`) took in a
#: whole run of the suite on 2 cores, written by ``pytest --module-seconds tests/module_seconds.json``.
#: The scheduler hands out the longest unit first; it only orders, so a stale file costs time, not tests.
MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")


def unit_of(nodeid: str) -> str:
    """The scheduling unit of a test: its module, or ``"slurm"`` for one of :data:`SLURM_MODULES`."""
    module = nodeid.split("::", 1)[0]
    return "slurm" if module in SLURM_MODULES else module


def make_scheduler(config, log):
    """Under ``--dist loadscope`` (pyproject.toml): each test module whole to one test process, the
    SLURM modules together as one unit. The longest unit (:data:`MODULE_SECONDS`) goes first to the
    first free process, and a process is given its next unit only when it is on its current one's
    last test, so that no long unit waits behind a busy process while another is free. (xdist's
    ``--dist loadgroup`` would express the units with marks, but groups nothing under pytest 9.2,
    whose node ids no longer take xdist's group suffix; its own loadscope order is by number of
    tests, which sends the few long tests last.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    known = json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.is_file() else {}

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            # a unit not in the file: a second a test, so a new module of many tests is not last
            longest = max(self.workqueue, key=lambda unit: known.get(unit, len(self.workqueue[unit])))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            # a process runs a test only once it knows the next one (or is told to stop), so it is
            # given its next unit when one test of its current unit is left, not earlier
            if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return ModuleScheduling(config, log)
