"""Run ids are a contract with results on disk: every ready grid and profile keeps its ids.

``tests/data/run_ids.json`` holds the ids each grid and profile expanded to when it was recorded.
A change that alters them (a new default, a renamed key, a section that leaks into the settings)
fails here and must say so and record the new ids on purpose.
"""

import json
from pathlib import Path

import pytest

from harness.config.grid import expand
from harness.config.spec import load_grid

REPO = Path(__file__).resolve().parent.parent
RECORDED = json.loads((REPO / "tests" / "data" / "run_ids.json").read_text())


@pytest.mark.parametrize("entry", sorted(RECORDED))
def test_run_ids_unchanged(entry):
    name, _, profile = entry.partition(":")
    if name == "lora.yaml":  # its peft: section's keys are peft's LoraConfig fields, checked with peft
        pytest.importorskip(
            "peft", reason="the peft extra is not installed: lora.yaml's keys cannot be checked"
        )
    grid = load_grid(REPO / "ablations" / name, profile=None if profile == "-" else profile)
    assert [r.run_id for r in expand(grid).runs] == RECORDED[entry]


def test_every_grid_and_profile_is_recorded():
    import yaml

    for path in sorted((REPO / "ablations").glob("*.yaml")):
        profiles = (yaml.safe_load(path.read_text()) or {}).get("profiles") or {}
        for profile in ["-", *profiles]:
            assert f"{path.name}:{profile}" in RECORDED, (path.name, profile)
