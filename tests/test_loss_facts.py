"""TRL's built-in losses are recorded in one place, ``harness.trl_boundary``: the record agrees with
what the installed TRL states, and every other list of losses (the loss fields a plugin may read,
the fields a loss is refused, the report's TRL metrics, the figures' fixed colours and named
variants, the benchmark's configurations) is derived from it, so a loss TRL adds reaches them all
from the record alone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from harness import trl_boundary

REPO = Path(__file__).resolve().parents[1]


def test_the_record_is_what_the_installed_trl_states():
    """A TRL that adds, drops or rewires a loss fails here: add it to the record in
    harness/trl_boundary.py (KNOWN_LOSS_TYPES, TRL_LOSS_READS), the one place every list derives from."""
    assert trl_boundary.loss_types() == trl_boundary.KNOWN_LOSS_TYPES
    assert trl_boundary.stated_loss_reads() == trl_boundary.TRL_LOSS_READS


def test_the_loss_fields_follow_from_what_each_loss_reads():
    assert trl_boundary.loss_fields() == (
        "epsilon", "epsilon_high", "delta", "importance_sampling_level",
        "sapo_temperature_pos", "sapo_temperature_neg",
        "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
    )  # fmt: skip
    assert trl_boundary.specific_loss_fields() == trl_boundary.loss_fields()[4:]
    assert set(trl_boundary.TRL_OFF_POLICY_ONLY_FIELDS) <= set(trl_boundary.specific_loss_fields())


#: Run in a fresh process: the record gets a loss "foo" reading a field of its own, and a named
#: variant of it, before anything that derives from the record is imported.
PROBE = textwrap.dedent(
    """
    import json
    from types import SimpleNamespace

    from harness import trl_boundary as b

    b.KNOWN_LOSS_TYPES = (*b.KNOWN_LOSS_TYPES, "foo")
    b.TRL_LOSS_READS["foo"] = ("epsilon", "foo_k")
    b.NAMED_LOSS_VARIANTS["foo_seq"] = {"loss_type": "foo", "importance_sampling_level": "sequence"}
    b.loss_types = lambda: b.KNOWN_LOSS_TYPES

    from harness import losses
    from harness.config import rules_trainer
    from harness.bench.settings import LOSS_VARIANTS
    from analysis import labels, style
    from analysis.report import TRL_LOSS_TYPES

    try:
        losses.register_loss("foo")
        refused = False
    except losses.PluginError:
        refused = True
    refusal = rules_trainer.rule_loss_fields(SimpleNamespace(loss_type="grpo", trainer={"foo_k": 2.0}))
    print(json.dumps({
        "loss_fields": "foo_k" in losses.LOSS_FIELDS,
        "specific": "foo_k" in losses.SPECIFIC_LOSS_FIELDS,
        "reads": list(losses.loss_reads("foo")),
        "name_refused": refused,
        "rule": [f.message for f in refusal],
        "report": "foo" in TRL_LOSS_TYPES,
        "fixed": sorted(n for n in ("foo", "foo_seq") if n in style._fixed_slots()),
        "named": [name for _, name in labels.NAMED_VARIANTS],
        "bench": {n: [v.loss_type, v.importance_sampling_level] for n, v in LOSS_VARIANTS.items() if n.startswith("foo")},
    }))
    """
)


def test_a_loss_added_to_the_record_reaches_every_list():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["loss_fields"] and found["specific"]
    assert found["reads"] == ["epsilon", "foo_k", "importance_sampling_level"]
    assert found["name_refused"], "a plugin may not take the name of TRL's new loss"
    assert found["rule"] and "only foo reads it" in found["rule"][0]
    assert found["report"]
    assert found["fixed"] == ["foo", "foo_seq"]
    assert found["named"][-1] == "foo_seq"
    assert found["bench"] == {"foo": ["foo", "token"], "foo_seq": ["foo", "sequence"]}


def test_the_built_in_losses_keep_their_colours_and_no_two_share_one():
    """The figures' colours do not move when the record's order does: GRPO and VESPO at the two most
    distinct hues, every built-in at a slot of its own, none at the grey of a missing value."""
    from analysis import style

    slots = style._fixed_slots()
    assert slots["grpo"] == 0 and slots["vespo"] == 3 and slots["dr_grpo"] == 1 and slots["gspo"] == 4
    assert len(set(slots.values())) == len(slots) and style._NONE_SLOT not in slots.values()
