"""``grpo-harness findings A --confirm B``: one grid's verdicts beside those of the same grid on
other seeds, replicated only when both agree; any folder that is not the same grid on other seeds
refused, naming the mismatch (analysis.report.confirm, analysis.finding_tables)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from analysis_helpers import md_rows, write_run

from analysis.finding_tables import replication
from analysis.report import ReportError
from analysis.report.confirm import confirm_findings
from harness import cli, layout

FINDING = {
    "claim": "clip-higher keeps entropy higher",
    "paper": "DAPO, arXiv:2503.14476, §3.1",
    "metric": "entropy",
    "window": [0.5, 1.0],
    "direction": "higher",
    "baseline": {"trainer.epsilon_high": 0.2},
    "variant": {"trainer.epsilon_high": 0.28},
    "scaled": "",
    "off_policy_only": False,
}


def write_grid(grid_dir, seeds=(0, 1, 2), *, effect=0.1, findings=None, lr=1e-4, variant_eh=0.28):
    """Two arms (epsilon_high 0.2 / ``variant_eh``) x ``seeds``; the variant's entropy ``effect``
    higher over the second half, a seed's own offset on both. ``findings`` replaces the one
    finding F1 (a function of the arms' run ids)."""
    arms = {"baseline": [], "variant": []}
    runs = {}
    for arm, eh in (("baseline", 0.2), ("variant", variant_eh)):
        for s in seeds:
            rid = f"{arm}-s{s}"
            step = np.arange(1, 21)
            trainer = {"loss_type": "dapo", "seed": s, "epsilon_high": eh, "learning_rate": lr}
            entropy = 1.0 - 0.01 * step + 0.01 * (s % 5) + (effect * (step > 10) if arm == "variant" else 0.0)
            write_run(
                grid_dir,
                rid,
                config={"task": {"name": "chain_sum"}, "model": "tiny", "trainer": trainer},
                varying={"trainer.epsilon_high": eh, "seed": s},
                columns={layout.STEP: step, "entropy": entropy + 0.003 * ((s * 7) % 3)},
                grid="g",
            )
            arms[arm].append(rid)
            runs[rid] = {"trainer.epsilon_high": eh, "seed": s}
    record = {
        "name": "g",
        "source": "g.yaml",
        "run_ids": list(runs),
        "varying": ["trainer.epsilon_high", "seed"],
        "runs": runs,
        "findings": findings(arms) if findings else {"F1": {**FINDING, "arms": arms}},
    }
    (grid_dir / layout.GRID_FILE).write_text(json.dumps(record))
    return arms


def test_replication_is_both_reproduced_or_both_opposite():
    assert replication("reproduced", "reproduced") == "replicated"
    assert replication("opposite", "opposite") == "replicated (opposite)"
    assert replication("reproduced", "opposite") == "contradicted"
    assert replication("reproduced", "not resolved") == "not replicated"
    assert replication("not resolved", "opposite") == "not replicated"
    assert replication("not resolved", "not enough runs (baseline 1, variant 2; 2 per arm needed)") == (
        "neither resolved"
    )


def test_confirm_prints_both_verdicts_side_by_side_as_a_table_to_paste(tmp_path, capsys):
    a, b = tmp_path / "findings", tmp_path / "heldout"
    write_grid(a, (0, 1, 2))
    write_grid(b, (3, 4, 5, 6))
    assert cli.main(["findings", str(a), "--confirm", str(b), "--markdown"]) == 0
    out = capsys.readouterr().out
    rows = md_rows(out)
    assert rows[0] == [
        "claim",
        "paper",
        "metric",
        "findings: effect [95% CI]",
        "findings: verdict",
        "heldout: effect [95% CI]",
        "heldout: verdict",
        "replicated",
    ]
    assert rows[2][0] == "F1: clip-higher keeps entropy higher" and rows[2][2] == "entropy (50-100% of steps)"
    assert rows[2][4] == rows[2][6] == "reproduced" and rows[2][7] == "replicated"
    assert rows[2][3].startswith("0.1 [") and rows[2][5].startswith("0.1 [")
    assert (
        "1 of 1 finding(s) replicated" in out
        and "findings on seed(s) 0, 1, 2, heldout on seed(s) 3, 4, 5, 6" in out
    )
    assert cli.main(["findings", str(a), "--confirm", str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["claim", "paper", "metric"] and lines[1].rstrip().endswith("replicated")


def test_a_verdict_that_does_not_hold_on_the_other_seeds_is_not_replicated(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_grid(a, (0, 1, 2))
    write_grid(b, (3, 4, 5), effect=-0.1)
    found = confirm_findings(a, b)
    (r,) = found.table.to_dict("records")
    assert (r["a: verdict"], r["b: verdict"], r["replicated"]) == ("reproduced", "opposite", "contradicted")
    assert found.first.frame.loc[0, "verdict"] == "reproduced"  # each folder's own table, its own Holm family
    assert "p_holm" in found.second.frame.columns


@pytest.mark.parametrize(
    ("other", "named"),
    [
        ({"lr": 2e-4}, "a setting differs: trainer.learning_rate = 0.0001 in a; 0.0002 in b"),
        ({"seeds": (2, 3, 4)}, "a and b share seed(s) 2: a run with the same settings and seed repeats"),
        ({"variant_eh": 0.4}, "a setting differs: trainer.epsilon_high = 0.2, 0.28 in a; 0.2, 0.4 in b"),
        (
            {"findings": lambda arms: {"F1": {**FINDING, "arms": arms}, "F2": {**FINDING, "arms": arms}}},
            "finding F2 is recorded in b's grid.json, not in a's",
        ),
        (
            {"findings": lambda arms: {"F1": {**FINDING, "window": [0.8, 1.0], "arms": arms}}},
            "finding F1: window is (0.5, 1.0) in a, (0.8, 1.0) in b",
        ),
        (
            {
                "findings": lambda arms: {
                    "F1": {**FINDING, "arms": {"baseline": arms["variant"], "variant": arms["baseline"]}}
                }
            },
            "finding F1: arm baseline selects runs of other settings in each folder",
        ),
    ],
)
def test_a_folder_that_is_not_the_same_grid_on_other_seeds_is_refused_naming_the_mismatch(
    tmp_path, capsys, other, named
):
    a, b = tmp_path / "a", tmp_path / "b"
    write_grid(a, (0, 1, 2))
    write_grid(b, other.pop("seeds", (3, 4, 5)), **other)
    with pytest.raises(ReportError) as e:
        confirm_findings(a, b)
    assert named in str(e.value), str(e.value)
    assert "b is not the grid of a on other seeds" in str(e.value) and "-o grid.seed=" in str(e.value)
    assert cli.main(["findings", str(a), "--confirm", str(b)]) == 2
    err = capsys.readouterr().err
    assert named in err


def test_confirm_takes_one_folder_and_names_a_missing_one(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    write_grid(a, (0, 1))
    write_grid(b, (2, 3))
    assert cli.main(["findings", str(a), str(a), "--confirm", str(b)]) == 2
    assert "confirms one results folder's findings" in capsys.readouterr().err
    assert cli.main(["findings", str(a), "--confirm", str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err
    assert cli.main(["findings", str(a), "--confirm", str(a)]) == 2
    assert "given twice" in capsys.readouterr().err


def test_a_run_whose_combination_of_settings_the_other_folder_lacks_is_named(tmp_path):
    # each setting has the same values in both folders, but the learning rates are swapped between the arms
    a, b = tmp_path / "a", tmp_path / "b"
    arms_a, arms_b = write_grid(a, (0, 1)), write_grid(b, (2, 3))
    for grid_dir, arms, lrs in ((a, arms_a, (1e-4, 2e-4)), (b, arms_b, (2e-4, 1e-4))):
        for arm, lr in zip(("baseline", "variant"), lrs, strict=True):
            for rid in arms[arm]:
                path = layout.run_dir(grid_dir, rid) / layout.CONFIG_FILE
                config = json.loads(path.read_text())
                config["config"]["trainer"]["learning_rate"] = lr
                path.write_text(json.dumps(config))
    with pytest.raises(ReportError) as e:
        confirm_findings(a, b)
    assert (
        "run a/baseline-s0 has no counterpart of the same settings: no run of b has this combination"
        in str(e.value)
    )
