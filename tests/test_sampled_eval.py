"""The sampled eval (``harness.sampled_eval_*``): its settings' checks, the sampling (seeded by the run's
seed and the step, invisible to torch's RNG, the temperature alone shaping the distribution), and a run
that records pass@k on its eval steps, in ``eval_start.json`` and in ``eval_samples.jsonl``, trains as
the same run without it, and draws the same eval samples when killed and resumed."""

from __future__ import annotations

import json
import pickle
import signal
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from helpers import make_spec, module_command

from harness import layout
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.models import passk
from harness.models.tasks import build_task, generate_completions, sampled_eval
from harness.models.tiny import TinyModelSpec, build_model, build_tokenizer
from harness.settings.schema import HarnessSettings, SpecError, TaskSpec

# ---------------------------------------------------------------------------------------------- settings

GRID = {
    "name": "sampled",
    "task": {
        "name": "chain_sum",
        "kwargs": {"min_terms": 2, "max_terms": 2, "max_digits": 1},
        "eval_size": 20,
    },
    "harness": {"device": "cpu", "eval_steps": 5},
    "trainer": {"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4, "loss_type": "grpo"},
}


def _problems(tmp_path: Path, **harness) -> str:
    """What a user is told of a grid with these harness settings: the section's own checks when
    the grid loads, the rules between sections when the plan is validated ("" when fine)."""
    data = {**GRID, "harness": {**GRID["harness"], **harness}}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        report = validate_plan(expand(load_grid(path)))
    except SpecError as e:
        return str(e)
    return "" if report.ok else report.format()


@pytest.mark.parametrize(
    ("harness", "expected"),
    [
        ({"sampled_eval_n": -1}, "harness.sampled_eval_n = -1 must be >= 0 samples per prompt."),
        (
            {"sampled_eval_temperature": 0.0},
            "harness.sampled_eval_temperature = 0.0 must be a finite number > 0",
        ),
        (
            {"sampled_eval_temperature": -1.0},
            "harness.sampled_eval_temperature = -1.0 must be a finite number > 0",
        ),
        (
            {"sampled_eval_temperature": ".inf"},
            "harness.sampled_eval_temperature = inf must be a finite number > 0",
        ),
        ({"sampled_eval_prompts": 0}, "harness.sampled_eval_prompts = 0 must be >= 1 prompt (or unset)."),
        (
            {"sampled_eval_n": 4, "sampled_eval_prompts": 21},
            "harness.sampled_eval_prompts = 21 > task.eval_size = 20: the eval split has 20 prompts. Set "
            "harness.sampled_eval_prompts to at most 20",
        ),
        (
            {"sampled_eval_n": 4, "eval_steps": 0},
            "harness.sampled_eval_n = 4 with harness.eval_steps = 0: the sampled eval runs at the greedy "
            "eval's steps, and this run has none",
        ),
    ],
)
def test_bad_sampled_eval_settings_are_refused_with_their_fix(tmp_path, harness, expected):
    if harness.get("sampled_eval_temperature") == ".inf":
        harness = {**harness, "sampled_eval_temperature": float("inf")}
    text = _problems(tmp_path, **harness)
    assert expected in text, text


def test_good_sampled_eval_settings_pass(tmp_path):
    assert _problems(tmp_path, sampled_eval_n=4, sampled_eval_prompts=20, sampled_eval_temperature=0.7) == ""
    assert _problems(tmp_path, sampled_eval_n=6) == ""  # every prompt of the split
    assert _problems(tmp_path, sampled_eval_n=0, eval_steps=0) == ""  # off by default


def test_the_defaults_turn_it_off_and_stay_out_of_a_runs_settings(tmp_path):
    h = HarnessSettings()
    assert (h.sampled_eval_n, h.sampled_eval_temperature, h.sampled_eval_prompts) == (0, 1.0, None)
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(GRID))
    (run,) = expand(load_grid(path)).runs
    assert not [k for k in run.settings["harness"] if k.startswith("sampled_eval")]


# ---------------------------------------------------------------------------------------------- sampling

SUM = TaskSpec("chain_sum", {"min_terms": 2, "max_terms": 2, "max_digits": 1}, train_size=16, eval_size=12)


@pytest.fixture(scope="module")
def random_lm():
    """A small untrained model (fast to build), its tokenizer and a task: it writes diverse text."""
    tok = build_tokenizer(list("0123456789+- ="), model_max_length=32)
    torch.manual_seed(0)
    model = build_model(TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2), tok)
    return model, tok, build_task(SUM, seed=0)


def _sample(random_lm, **kw):
    model, tok, task = random_lm
    return sampled_eval(model, tok, task, **{"n": 4, "temperature": 1.0, "max_new_tokens": 4, **kw})


def test_sampling_is_seeded_by_seed_and_step_and_leaves_torchs_rng_alone(random_lm):
    model, _, task = random_lm
    model.train()
    before = torch.get_rng_state()
    first = _sample(random_lm, prompts=8, seed=3, step=2)
    assert torch.equal(torch.get_rng_state(), before)  # training draws what it would have drawn
    assert model.training  # mode restored
    assert first.completions == _sample(random_lm, prompts=8, seed=3, step=2).completions
    assert first.completions != _sample(random_lm, prompts=8, seed=3, step=4).completions
    assert first.completions != _sample(random_lm, prompts=8, seed=4, step=2).completions
    assert len(first.completions) == len(first.scores) == 8 and all(len(r) == 4 for r in first.completions)
    assert first.prompts == task.eval_prompts[:8]
    assert first.scores == [
        [task.score(c, e) for c in row] for row, e in zip(first.completions, task.eval_entries, strict=False)
    ]
    assert (first.pass_at, first.accuracy) == passk.summarise(first.scores)
    assert sorted(first.pass_at) == [1, 2, 4] and (first.step, first.n, first.temperature) == (2, 4, 1.0)
    assert len(_sample(random_lm, n=3).completions) == len(task.eval_prompts)  # None: every prompt
    assert sorted(_sample(random_lm, n=3, prompts=2).pass_at) == [1, 2, 3]


def test_the_temperature_alone_shapes_the_distribution(random_lm):
    model, tok, task = random_lm
    saved = model.generation_config.to_dict()
    model.eval()
    greedy = generate_completions(model, tok, task.eval_prompts, max_new_tokens=4)
    try:
        # a model whose own generation config would make sampling greedy (top_k 1, a tiny top_p)
        model.generation_config.top_k, model.generation_config.top_p = 1, 0.01
        model.generation_config.repetition_penalty = 5.0
        drawn = _sample(random_lm, n=4)
        assert any(c != g for row, g in zip(drawn.completions, greedy, strict=True) for c in row)
        cold = _sample(random_lm, n=2, temperature=1e-4)  # near zero: the greedy completions
        assert cold.completions == [[g, g] for g in greedy]
    finally:
        for key in ("top_k", "top_p", "repetition_penalty"):
            setattr(model.generation_config, key, saved.get(key))


def test_bad_arguments_are_refused(random_lm):
    with pytest.raises(ValueError, match="prompts must lie in"):
        _sample(random_lm, prompts=13)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        _sample(random_lm, temperature=0.0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        _sample(random_lm, n=0)


# ---------------------------------------------------------------------------------------------- a run

#: Columns that measure the machine, not the training (as in test_faults.py).
MACHINE = ("time/", "memory/", "machine/", "step_time")
N, PROMPTS = 4, 16
PASS_COLUMNS = [f"{layout.PASS_AT_PREFIX}{k}" for k in passk.ks_for(N)]


def _metrics(run_dir):
    return pq.read_table(run_dir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()


def _eval_samples(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / layout.EVAL_SAMPLES_FILE).read_text().splitlines()]


def _recomputed(lines: list[dict], step: int) -> dict[str, float]:
    """pass@k and the mean score of one eval step, from its lines of eval_samples.jsonl alone."""
    rows = sorted((r for r in lines if r["step"] == step), key=lambda r: r["index"])
    assert [r["index"] for r in rows] == list(range(PROMPTS))
    pass_at, accuracy = passk.summarise([r["scores"] for r in rows])
    return {
        **{f"{layout.PASS_AT_PREFIX}{k}": v for k, v in pass_at.items()},
        layout.SAMPLED_ACCURACY: accuracy,
    }


def _killed_then_resumed(spec, tmp_path: Path) -> Path:
    """The run SIGKILLed right after step 4's metrics row (its eval samples written, checkpoint-4
    not), then trained again: it resumes from checkpoint-2 (tests/fault_inject.py)."""
    spec_path, run_dir = tmp_path / "spec.pkl", tmp_path / "killed"
    spec_path.write_bytes(pickle.dumps(spec))
    for point, code in (("step:4", -signal.SIGKILL), ("none", 0)):
        command, env = module_command("fault_inject", str(spec_path), str(run_dir), point)
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=600, env={**env, "OMP_NUM_THREADS": "1"}
        )
        assert proc.returncode == code, proc.stderr[-3000:]
        if point == "step:4":
            assert {r["step"] for r in _eval_samples(run_dir)} == {0, 2, 4}  # step 4's, to be dropped
            stamp = (run_dir / layout.START_EVAL_FILE).stat().st_mtime_ns
    assert (run_dir / layout.START_EVAL_FILE).stat().st_mtime_ns == stamp  # measured once
    assert json.loads((run_dir / layout.DONE_FILE).read_text())["resumed_from"] == 2
    return run_dir


@pytest.mark.slow
def test_a_run_records_pass_at_k_trains_as_without_it_and_resumes_to_the_same_samples(
    tmp_path, tiny_model, chain_sum_task, summary
):
    from harness.train.training import train

    greedy_only = make_spec(tiny_model, chain_sum_task, max_steps=4, num_iterations=2).with_settings(
        {
            "harness.eval_steps": 2,
            "harness.checkpoint_steps": 2,
            "harness.flush_every": 1,
            "task.eval_size": 24,
        }
    )
    sampled = greedy_only.with_settings(
        {"harness.sampled_eval_n": N, "harness.sampled_eval_prompts": PROMPTS}
    )
    off_dir, on_dir = tmp_path / "off", tmp_path / "on"
    train(greedy_only, off_dir)
    train(sampled, on_dir)
    assert not (off_dir / layout.EVAL_SAMPLES_FILE).exists()
    a, b = _metrics(off_dir), _metrics(on_dir)
    assert not set(PASS_COLUMNS) & set(a.columns)
    for column in [*PASS_COLUMNS, layout.SAMPLED_ACCURACY]:
        assert list(b[column].notna()) == [False, True, False, True], column  # the eval steps 2 and 4
    training = [c for c in a.columns if not c.startswith(MACHINE) and c != layout.RUN_ID]
    assert [c for c in training if not a[c].equals(b[c])] == []  # eval/accuracy included

    lines = _eval_samples(on_dir)
    assert [(r["step"], r["index"]) for r in lines] == [(s, i) for s in (0, 2, 4) for i in range(PROMPTS)]
    task = build_task(sampled.task, seed=sampled.seed)
    for r in lines:
        assert r["prompt"] == task.eval_prompts[r["index"]] and len(r["completions"]) == N
        assert r["scores"] == [task.score(c, task.eval_entries[r["index"]]) for c in r["completions"]]
    for step in (2, 4):
        row = b[b[layout.STEP] == step].iloc[0]
        assert {k: row[k] for k in _recomputed(lines, step)} == _recomputed(lines, step)  # exactly
    start = json.loads((on_dir / layout.START_EVAL_FILE).read_text())
    assert {k: start[k] for k in _recomputed(lines, 0)} == _recomputed(lines, 0)
    assert (start["sampled_eval_n"], start["sampled_eval_temperature"], start["sampled_eval_prompts"]) == (
        N,
        1.0,
        PROMPTS,
    )
    assert (
        start[layout.EVAL_ACCURACY]
        == json.loads((off_dir / layout.START_EVAL_FILE).read_text())[layout.EVAL_ACCURACY]
    )
    summary(
        f"sampled eval of {N} x {PROMPTS} prompts on the tiny model: {start['sampled_seconds']:.2f} s "
        f"(the whole start eval {start['seconds']:.2f} s); pass@k at step 0 "
        + ", ".join(f"{k} {start[k]:.3f}" for k in PASS_COLUMNS)
    )

    resumed = _killed_then_resumed(sampled, tmp_path)
    assert _eval_samples(resumed) == lines  # step 4's samples drawn again, the same ones, once
    timed = ("seconds", "sampled_seconds")  # wall times of another process
    again = json.loads((resumed / layout.START_EVAL_FILE).read_text())
    assert {k: v for k, v in again.items() if k not in timed} == {
        k: v for k, v in start.items() if k not in timed
    }
    c = _metrics(resumed)
    columns = [col for col in b.columns if not col.startswith(MACHINE) and col != layout.RUN_ID]
    assert [col for col in columns if not b[col].equals(c[col])] == []
