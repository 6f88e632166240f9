"""Every ready grid in ablations/ plans with its expected count and validates, in every profile."""

from pathlib import Path

import pytest

from harness.config.grid import expand, steps_per_epoch
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.config.yaml_files import read_yaml

ABLATIONS = sorted((Path(__file__).resolve().parent.parent / "ablations").glob("*.yaml"))
EXPECTED_RUNS = {
    "base.yaml": 1,
    "smoke.yaml": 9,  # 3 loss types x 3 seeds
    "chat.yaml": 9,  # smoke's 3 loss types x 3 seeds on tiny-chat
    "loss_type.yaml": 27,  # 8 TRL loss types + GSPO, x 3 seeds
    "clip_range.yaml": 36,  # 3 clip pairs x (3 num_iterations + the GA4/spg2/mu2 control) x 3 seeds
    "vespo.yaml": 24,  # 4 (k, lambda) settings x 3 staleness levels x 2 seeds
    "ref_sync.yaml": 21,  # (no sync + 2 periods x 2 alphas + per epoch x 2 alphas) x 3 seeds
    "plugins.yaml": 15,  # grpo, dapo and the gmpo, kl_cov and clip_cov plugins, x 3 seeds
    "zero3.yaml": 4,  # grpo, dapo x 2 seeds, each run 2 processes under DeepSpeed ZeRO-3
    "lora.yaml": 4,  # LoRA rank 4, 16 x 2 seeds
    # F0's unclipped arm (its clipped arm is F3's grpo), F1 4 values x 2 seeds, F2 2, F3 3, F4 2, F6 1
    # against F4's synced arm: 9 arms x 4 seeds; F5's 2 controls x 2 seeds against F2's grpo; +8 (F1)
    "findings.yaml": 48,
    "tasks.yaml": 18,  # grpo, dapo x 3 tasks (a task axis) x 3 seeds
    "dapo.yaml": 24,  # DAPO Table 1: 6 rows, each adding one technique, x 4 seeds, on tiny-steps
}


def profiles(path):
    return [None, *(read_yaml(path).get("profiles") or {})]


@pytest.mark.slow
@pytest.mark.parametrize("path", ABLATIONS, ids=[p.name for p in ABLATIONS])
def test_grid_plans_and_validates(path):
    assert path.name in EXPECTED_RUNS, f"add the expected run count of {path.name} to this test"
    for profile in profiles(path):
        plan = expand(load_grid(path, profile=profile))
        report = validate_plan(plan)
        assert report.ok, report.format(str(path))
        if profile in (None, "paper"):
            assert len(plan.runs) == EXPECTED_RUNS[path.name], profile
        assert not plan.duplicates


def test_clip_family_warns_exactly_on_policy_cells():
    plan = expand(load_grid(ABLATIONS[0].parent / "clip_range.yaml"))
    report = validate_plan(plan)
    warned = {w.run_id for w in report.warnings if "no effect" in w.message}
    on_policy = {
        r.run_id
        for r in plan.runs
        if r.get("trainer.num_iterations") == 1 or r.get("trainer.gradient_accumulation_steps") == 4
    }
    assert warned == on_policy and len(warned) == 18


def test_loss_type_family_covers_every_loss_and_gspo():
    plan = expand(load_grid(ABLATIONS[0].parent / "loss_type.yaml"))
    variants = {
        (r.get("trainer.loss_type"), r.get("trainer.importance_sampling_level", "token")) for r in plan.runs
    }
    losses = {lt for lt, _ in variants}
    assert losses == {"grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"}
    assert ("grpo", "sequence") in variants  # GSPO
    assert all(r.get("trainer.num_iterations") > 1 for r in plan.runs)


def test_ref_sync_per_epoch_resolved_to_steps():
    plan = expand(load_grid(ABLATIONS[0].parent / "ref_sync.yaml"))
    per_epoch = [r for r in plan.runs if r.subgrid == "per_epoch"]
    assert len(per_epoch) == 6
    for r in per_epoch:
        # 200 prompts x 8 generations x 2 iterations / (64 completions per step)
        assert r.get("trainer.ref_model_sync_steps") == 50
        assert r.get("harness.ref_model_sync_every") == "epoch"
    assert all(r.get("trainer.beta") > 0 for r in plan.runs)


def test_steps_per_epoch_by_hand():
    t = {
        "num_generations": 8,
        "num_iterations": 1,
        "per_device_train_batch_size": 16,
        "gradient_accumulation_steps": 4,
    }
    assert steps_per_epoch(t, 1000) == round(1000 * 8 / 64)
    assert steps_per_epoch(t, 1000, num_processes=2) == round(1000 * 8 / 128)
    assert steps_per_epoch({**t, "num_iterations": 3}, 1000) == 375


def test_vespo_family_warns_that_k_lambda_do_nothing_on_policy():
    """phi(1) = 1 for every (k, lambda): on-policy VESPO cells differ only in name."""
    plan = expand(load_grid(ABLATIONS[0].parent / "vespo.yaml"))
    warned = {w.run_id for w in validate_plan(plan).warnings if "no effect" in w.message}
    on_policy = {r.run_id for r in plan.runs if r.get("trainer.num_iterations") == 1}
    assert warned == on_policy and len(warned) == 8
