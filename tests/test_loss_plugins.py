"""Loss plugins are faithful to TRL: mirrors of TRL's built-ins through the plugin path give TRL's loss,
gradients and metrics, on the bench stand-in and over real steps of the tiny model.

The stand-in half runs ``GRPOTrainer._compute_loss`` (TRL's own code) and
:func:`harness.losses.compute.plugin_loss` (the plugin path with a mirror) on the same synthetic
batch, over shapes, masks with empty rows, beta > 0 with and without ``use_bias_correction_kl``,
gradient accumulation, the entropy and off-policy masks and the entropy bonus, and asserts the
loss, the gradient into the log-probs and every metric agree within 1e-6. The comparison is shown
to catch a change: a copy of TRL's ``_compute_loss`` with one clamp altered fails it.
"""

from __future__ import annotations

import inspect
import math
import textwrap

import pyarrow.parquet as pq
import pytest
import torch
from trl import GRPOTrainer

from harness import layout
from harness.losses import REGISTRY
from harness.losses import mirrors as _mirrors  # noqa: F401  (registers the mirrors)
from harness.losses.compute import plugin_loss
from harness.losses.stand_in import LossProbe, make_loss_batch
from harness.settings.runs import RunSpec
from harness.train.training import train

TOL = 1e-6
#: (mirror plugin, TRL loss_type, GRPOConfig settings of both)
CASES = [
    ("grpo_mirror", "grpo", {}),
    ("dapo_mirror", "dapo", {"epsilon_high": 0.28}),
    ("bnpo_mirror", "bnpo", {}),
    ("dr_grpo_mirror", "dr_grpo", {"delta": 1.05}),
    ("luspo_mirror", "luspo", {"importance_sampling_level": "sequence"}),
    ("cispo_mirror", "cispo", {"epsilon_high": 1.05}),
    ("grpo_mirror", "grpo", {"importance_sampling_level": "sequence", "epsilon": 3e-3, "epsilon_high": 4e-3}),
    ("vespo_mirror", "vespo", {}),
]
CASE_IDS = ["grpo", "dapo", "bnpo", "dr_grpo", "luspo", "cispo", "gspo", "vespo"]
#: (B, T, rows made empty) and extra settings exercising the code around the formula
SHAPES = [(1, 1, ()), (4, 7, (1,)), (8, 16, (0, 5)), (16, 3, ())]
EXTRAS = [
    {},
    {"beta": 0.04},
    {"beta": 0.04, "use_bias_correction_kl": True},
    {"gradient_accumulation_steps": 2, "steps_per_generation": 4},
    {"top_entropy_quantile": 0.5, "off_policy_mask_threshold": 0.01},
    {"entropy_coef": 0.01, "training": False},
    {"use_adaptive_entropy": True, "entropy_coef": 0.01, "gradient_accumulation_steps": 2},
]


def _batch(b: int, t: int, empty: tuple[int, ...], seed: int):
    batch = make_loss_batch(b, t, seed=seed, log_ratio_std=0.3)
    gen = torch.Generator().manual_seed(seed + 1)
    batch.inputs["ref_per_token_logps"] = batch.per_token_logps.detach() + 0.2 * torch.randn(
        b, t, generator=gen
    )
    for row in empty:
        batch.inputs["completion_mask"][row] = 0
    return batch


def _run(loss_fn, probe, batch):
    loss = loss_fn(probe, batch)
    loss.backward()
    grad = batch.per_token_logps.grad.clone()
    batch.per_token_logps.grad = None
    return (
        loss.detach(),
        grad,
        {k: v[0] for k, v in probe._metrics["train" if probe.model.training else "eval"].items()},
    )


def compare(name, loss_type, config, shape, extra, trl_loss=None, seed=0):
    """Max abs differences (loss, gradient, metrics) between TRL's loss and the mirror's."""
    b, t, empty = shape
    batch = _batch(b, t, empty, seed)
    settings = {**config, **extra}
    plugin = REGISTRY[name]
    builtin = LossProbe(loss_type, batch.per_token_logps, batch.entropies, **settings)
    mirror = LossProbe(plugin.trl_loss_type, batch.per_token_logps, batch.entropies, **settings)
    trl_loss = trl_loss or (lambda p, x: GRPOTrainer._compute_loss(p, None, x.inputs))
    l1, g1, m1 = _run(trl_loss, builtin, batch)
    l2, g2, m2 = _run(lambda p, x: plugin_loss(p, None, x.inputs, plugin, {}), mirror, batch)
    assert set(m1) == set(m2), (sorted(m1), sorted(m2))
    metric_diff = max(
        (0.0 if (math.isnan(m1[k]) and math.isnan(m2[k])) else abs(m1[k] - m2[k]) for k in m1), default=0.0
    )
    return (l1 - l2).abs().item(), (g1 - g2).abs().max().item(), metric_diff


@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: ",".join(e) or "plain")
@pytest.mark.parametrize(("name", "loss_type", "config"), CASES, ids=CASE_IDS)
def test_mirror_matches_trl_on_the_stand_in(name, loss_type, config, extra):
    for i, shape in enumerate(SHAPES):
        diffs = compare(name, loss_type, config, shape, extra, seed=i)
        assert max(diffs) <= TOL, (shape, diffs)


def _altered_trl_loss(old: str, new: str):
    """A copy of TRL's ``GRPOTrainer._compute_loss`` with one piece of its source replaced."""
    import trl.trainer.grpo_trainer as module

    source = textwrap.dedent(inspect.getsource(GRPOTrainer._compute_loss))
    assert old in source, f"TRL's _compute_loss no longer contains {old!r}"
    namespace = dict(vars(module))
    exec(compile(source.replace(old, new).replace("@profiling_decorator", ""), "altered", "exec"), namespace)
    return lambda p, x: namespace["_compute_loss"](p, None, x.inputs)


@pytest.mark.parametrize(
    ("case", "old", "new"),
    [
        (0, "1 + self.epsilon_high)", "1 + 2 * self.epsilon_high)"),  # grpo's upper clamp
        (5, "max=self.epsilon_high).detach()", "max=self.epsilon_high + 0.1).detach()"),  # cispo's cap
        (1, "* self.current_gradient_accumulation_steps / self.args.steps_per_generation", ""),  # dapo's GA
    ],
    ids=["grpo-clamp", "cispo-cap", "dapo-normaliser"],
)
def test_the_comparison_catches_an_altered_builtin(case, old, new):
    name, loss_type, config = CASES[case]
    altered = _altered_trl_loss(old, new)
    extra = {"gradient_accumulation_steps": 2, "steps_per_generation": 4}
    assert max(compare(name, loss_type, config, (8, 16, (0,)), extra)) <= TOL  # the copy itself is faithful
    assert max(compare(name, loss_type, config, (8, 16, (0,)), extra, trl_loss=altered)) > 1e-4


# --- real steps of the tiny model ------------------------------------------------------------------

#: Columns that are wall time or the machine's, not the training's.
TIME_COLUMNS = {
    layout.STEP_WALL_S,
    layout.ELAPSED_S,
    layout.PEAK_MEMORY_MB,
    layout.CONCURRENT_RUNS,
    "step_time",
}


def _spec(tiny_model, task, loss_type, plugins=(), **trainer):
    settings = {
        "seed": 0,
        "model": tiny_model,
        "task": {"name": task.name, "kwargs": dict(task.kwargs), "train_size": 256},
        "harness": {"device": "cpu", "eval_steps": 0, "samples_steps": 0},
        "trainer": {
            "max_steps": 20,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 6,
            "learning_rate": 1e-3,
            "loss_type": loss_type,
            "seed": 0,
            **trainer,
        },
    }
    if plugins:
        settings["plugins"] = list(plugins)
    return RunSpec(grid="t", settings=settings)


def _metrics(tmp_path, spec, tag):
    rdir = tmp_path / tag / spec.run_id
    train(spec, rdir)
    return pq.read_table(rdir / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas()


@pytest.mark.parametrize(
    ("name", "loss_type", "trainer"),
    [
        ("grpo_mirror", "grpo", {"num_iterations": 2, "epsilon": 0.05}),
        ("dapo_mirror", "dapo", {"gradient_accumulation_steps": 2, "steps_per_generation": 4}),
        ("cispo_mirror", "cispo", {"num_iterations": 2, "epsilon_high": 1.02}),
        (
            "grpo_mirror",
            "grpo",
            {"num_iterations": 2, "importance_sampling_level": "sequence", "epsilon": 3e-3},
        ),
        ("vespo_mirror", "vespo", {"gradient_accumulation_steps": 2, "steps_per_generation": 4}),
    ],
    ids=["grpo-mu2", "dapo-ga2-spg4", "cispo-mu2", "gspo-mu2", "vespo-ga2-spg4"],
)
def test_twenty_real_steps_give_the_builtins_metric_columns(
    tmp_path, tiny_model, chain_sum_task, name, loss_type, trainer
):
    builtin = _metrics(tmp_path, _spec(tiny_model, chain_sum_task, loss_type, **trainer), "builtin")
    mirror = _metrics(
        tmp_path, _spec(tiny_model, chain_sum_task, name, ["harness.losses.mirrors"], **trainer), "mirror"
    )
    assert list(builtin["step"]) == list(range(1, 21))
    # what the machine was doing is read at most once a second: a run may lack a reading the other has
    machine = {
        c for c in {*builtin.columns, *mirror.columns} if c.startswith(("time/", "memory/", "machine/"))
    }
    assert set(builtin.columns) - machine == set(mirror.columns) - machine
    columns = sorted(set(builtin.columns) - TIME_COLUMNS - machine - {"run_id"})
    assert {"loss", "entropy", "reward", "w_seq/mean"} <= set(columns)
    assert (builtin[layout.OFF_POLICY] > 0).any()  # the ratios moved, so the formula mattered
    for col in columns:
        a, b = builtin[col].to_numpy(), mirror[col].to_numpy()
        same = (a == b) | (pd_isnan(a) & pd_isnan(b))
        assert same.all(), (col, a[~same][:3], b[~same][:3])


def pd_isnan(values):
    import pandas as pd

    return pd.isna(values)
