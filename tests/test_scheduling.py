"""The suite's scheduler (tests/scheduling.py): whole units to a test process, the longest first, the
next unit only when a process is on its last test."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import scheduling

TESTS = Path(__file__).resolve().parent


class FakeNode:
    """What xdist's scheduler uses of a test process: it is sent test indexes, and told to stop."""

    def __init__(self, name: str):
        self.name, self.sent, self.shutting_down = name, [], False
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indexes):
        self.sent.append(list(indexes))

    def shutdown(self):
        self.shutting_down = True


def scheduler(known: dict, monkeypatch, tmp_path, processes: int = 2):
    seconds = tmp_path / "module_seconds.json"
    seconds.write_text(json.dumps(known))
    monkeypatch.setattr(scheduling, "MODULE_SECONDS", seconds)
    values = {"dist": "loadscope", "tx": [f"{processes}*popen"]}
    config = SimpleNamespace(getvalue=values.get, option=SimpleNamespace(loadscopereorder=True))
    return scheduling.make_scheduler(config, None)


COLLECTION = [
    "tests/test_many.py::test_a",
    "tests/test_many.py::test_b",
    "tests/test_many.py::test_c",
    "tests/test_long.py::test_one",
    "tests/test_long.py::test_two",
    "tests/test_slurm.py::test_x",
    "tests/test_multinode.py::test_y",
]


def test_the_longest_unit_goes_first_and_a_process_waits_for_its_last_test(monkeypatch, tmp_path):
    sched = scheduler(
        {"tests/test_long.py": 500.0, "slurm": 900.0, "tests/test_many.py": 10.0}, monkeypatch, tmp_path
    )
    a, b = FakeNode("a"), FakeNode("b")
    for node in (a, b):
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    # the SLURM modules are one unit, the longest; then test_long; xdist alone would send
    # test_many (most tests) first
    assert [COLLECTION[i] for i in a.sent[0]] == [
        "tests/test_slurm.py::test_x",
        "tests/test_multinode.py::test_y",
    ]
    assert [COLLECTION[i].split("::")[0] for i in b.sent[0]] == ["tests/test_long.py"] * 2
    assert len(a.sent) == len(b.sent) == 1  # each on a unit of two tests: nothing more yet
    sched.mark_test_complete(b, 3)  # b is on its last test: it is given the next unit
    assert len(b.sent) == 2 and [COLLECTION[i] for i in b.sent[1]][0] == "tests/test_many.py::test_a"
    assert not sched.workqueue


def test_a_unit_without_a_recorded_time_counts_a_second_a_test(monkeypatch, tmp_path):
    sched = scheduler({"tests/test_long.py": 2.5}, monkeypatch, tmp_path, processes=1)
    a = FakeNode("a")
    sched.add_node(a)
    sched.add_node_collection(a, COLLECTION)
    sched.schedule()
    assert COLLECTION[a.sent[0][0]] == "tests/test_many.py::test_a"  # 3 tests, 3 s: before 2.5 s


def test_the_recorded_units_are_the_suites():
    known = json.loads(scheduling.MODULE_SECONDS.read_text())
    modules = {f"tests/{p.name}" for p in TESTS.glob("test_*.py")} - set(scheduling.SLURM_MODULES)
    assert set(known) - modules - {"slurm"} == set(), (
        "modules gone: pytest --module-seconds tests/module_seconds.json"
    )
