"""Property-based tests of the grid loader, the ``-o`` parser and the ``report:`` section: any YAML
document or override string gives either a plan (exit 0) or exit 2 with a message; never a
traceback, never a file written. Bounded (``max_examples``) so that it runs in CI in seconds.

Documents are drawn from the grid's own vocabulary (sections, real field names, report keys) mixed
with arbitrary text, so that most examples get past the parser and reach the checks behind it.
``plugins:`` is never drawn: it imports the modules it names.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TOP = [
    "name", "model", "seed", "task", "trainer", "harness", "executor", "grid", "zip", "subgrids",
    "profiles", "report", "tiny", "tiny_chat", "peft", "description", "notes", "include", "findings",
]  # fmt: skip
FIELDS = [
    "learning_rate", "loss_type", "max_steps", "epsilon", "epsilon_high", "beta", "num_generations",
    "per_device_train_batch_size", "num_iterations", "sync_ref_model", "ref_model_sync_steps",
    "ref_model_mixup_alpha", "deepspeed", "fsdp", "report_to", "importance_sampling_level",
    "vespo_k_pos", "name", "kwargs", "train_size", "eval_size", "device", "eval_steps", "threads",
    "tasks_per_node", "nodes", "timeout_min", "partition", "hue", "baseline", "curves", "metrics",
    "smoothing", "col", "row", "target", "r", "lora_alpha", "target_modules", "set", "sft_steps",
    "trainer.loss_type", "trainer.epsilon", "seed", "quick", "paper", "chain_sum", "grpo", "dapo",
]  # fmt: skip
KEY = st.one_of(st.sampled_from(FIELDS), st.text(max_size=12)).filter(lambda k: k != "plugins")
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),
    st.sampled_from(FIELDS),
    st.text(max_size=24),
)
VALUE = st.recursive(
    SCALAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEY, inner, max_size=4), max_leaves=24
)
DOCUMENT = st.dictionaries(st.sampled_from(TOP), VALUE, max_size=7)
VALID = {
    "name": "fuzz",
    "model": "tiny",
    "task": {
        "name": "chain_sum",
        "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1},
        "train_size": 64,
    },
    "trainer": {
        "max_steps": 4,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 6,
    },
}
FUZZ = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def _plan(text: str, *overrides: str) -> tuple[int, str]:
    """``grpo-harness plan`` in this process on a grid file holding ``text``: (exit status, what it
    printed). Fails on a traceback or on any file written besides the grid file itself."""
    from harness.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "g.yaml"
        path.write_text(text, encoding="utf-8")
        args = ["plan", str(path), "--results", str(root / "results")]
        for o in overrides:
            args += [f"-o={o}"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(args)
            except SystemExit as e:  # argparse's own usage errors
                code = e.code
        written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p != path)
        assert written == [], written
    said = out.getvalue()
    assert code in (0, 2), said
    assert "Traceback" not in said, said
    if code == 2:
        assert said.strip(), "exit 2 without a message"
    return code, said


@pytest.mark.slow
@FUZZ
@given(DOCUMENT)
def test_any_grid_document_plans_or_is_refused_with_a_message(document):
    _plan(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(st.text(max_size=300))
def test_any_file_text_plans_or_is_refused_with_a_message(text):
    _plan(text)


@pytest.mark.slow
@FUZZ
@given(
    st.lists(st.text(max_size=40) | st.builds(lambda k, v: f"{k}={v}", KEY, st.text(max_size=20)), max_size=3)
)
def test_any_override_plans_or_is_refused_with_a_message(overrides):
    _plan(yaml.safe_dump(VALID), *overrides)


@pytest.mark.slow
@FUZZ
@given(st.dictionaries(st.sampled_from(FIELDS + ["x_axis", "ci", "seeds", "dynamics"]), VALUE, max_size=4))
def test_any_report_section_plans_or_is_refused_with_a_message(report):
    _plan(yaml.safe_dump({**VALID, "report": report}, allow_unicode=True))


def test_the_valid_grid_plans():
    assert _plan(yaml.safe_dump(VALID))[0] == 0
