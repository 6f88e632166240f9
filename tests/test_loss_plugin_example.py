"""The loss plugin page's example (docs/plugins.md) end to end, entry-point discovery, the errors a broken
plugin gets before anything runs, and the hand-computed values of GMPO and KL-Cov."""

from __future__ import annotations

import math
import re
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from helpers import FAST_TINY, REPO, cli

from harness import layout, losses
from harness.config.grid import expand
from harness.config.spec import load_grid
from harness.config.validate import validate_plan
from harness.settings.schema import SpecError

DOC = REPO / "docs" / "plugins.md"


def doc_blocks() -> dict[str, str]:
    """The first fenced block of each language on the documentation's loss plugin page."""
    blocks: dict[str, str] = {}
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", DOC.read_text(), flags=re.S):
        blocks.setdefault(lang, body)
    return blocks


def write_package(root: Path, module: str, source: str) -> Path:
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(textwrap.dedent(source))
    return root


GRID = """
name: t
plugins: [{module}]
model: tiny
task: {{name: chain_sum, kwargs: {{min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}}}
trainer: {{max_steps: 2, per_device_train_batch_size: 8, num_generations: 4, max_completion_length: 6,
          loss_type: {loss}{extra}}}
"""


def plan_errors(tmp_path, module, loss, extra="", overrides=()):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID.format(module=module, loss=loss, extra=extra))
    try:
        grid = load_grid(path, overrides)
    except SpecError as e:
        return list(e.problems)
    return [f.message for f in validate_plan(expand(grid)).errors]


PLUGIN = """
from harness.losses import Hyperparameter, register_loss
from harness.losses.compute import LossOutput

@register_loss("{name}", reduction="grpo", hyperparameters=[Hyperparameter("{hname}", float, 1.0, "a scale", minimum=0.0)])
def f(inputs):
    return LossOutput({expr})
"""


def test_missing_module(tmp_path, clean_registry):
    (err,) = plan_errors(tmp_path, "no_such_losses", "grpo")
    assert "module 'no_such_losses' not found" in err and "PYTHONPATH" in err


def test_module_raising_at_import(tmp_path, monkeypatch, clean_registry):
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "raising_losses", "x = 1 / 0\n")))
    (err,) = plan_errors(tmp_path, "raising_losses", "grpo")
    assert "importing 'raising_losses' raised ZeroDivisionError" in err and "__init__.py:1" in err


def test_module_exiting_at_import(tmp_path, monkeypatch, clean_registry):
    """sys.exit() in a plugin's import would end `plan` with its status and no word: it is a problem."""
    monkeypatch.syspath_prepend(
        str(write_package(tmp_path / "p", "exiting_losses", "import sys\nsys.exit(0)\n"))
    )
    (err,) = plan_errors(tmp_path, "exiting_losses", "grpo")
    assert "importing 'exiting_losses' called sys.exit(0)" in err and "__init__.py:2" in err


def test_module_exiting_at_import_is_placed_in_the_module_where_a_library_wraps_sys_exit(
    tmp_path, monkeypatch, clean_registry
):
    """A library may replace sys.exit with its own (wandb does once a run has started in the
    process): the place named is still the plugin's line, not the wrapper's."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "exit_wrapper.py").write_text(
        "import sys\n_exit = sys.exit\ndef wrapped(code=0):\n    _exit(code)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    import exit_wrapper

    monkeypatch.setattr(sys, "exit", exit_wrapper.wrapped)
    monkeypatch.syspath_prepend(
        str(write_package(tmp_path / "p", "wrapped_exit_losses", "import sys\nsys.exit(0)\n"))
    )
    (err,) = plan_errors(tmp_path, "wrapped_exit_losses", "grpo")
    assert "called sys.exit(0)" in err and "wrapped_exit_losses/__init__.py:2" in err, err


def test_relative_module_name(tmp_path, clean_registry):
    (err,) = plan_errors(tmp_path, ".my_losses", "grpo")
    assert "'.my_losses' is a relative module name" in err and "(my_losses if" in err


def test_unknown_loss_type_lists_builtins_and_plugins(tmp_path, monkeypatch, clean_registry):
    src = PLUGIN.format(name="ok_loss", hname="ok_scale", expr="-inputs.advantages * inputs.per_token_logps")
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "ok_losses", src)))
    (err,) = plan_errors(tmp_path, "ok_losses", "ok_los")
    assert "'ok_los' is not a TRL loss type (grpo, " in err and "ok_loss" in err and "gmpo" in err


SUBGRID = """
name: t
plugins: {modules}
model: tiny
task: {{name: chain_sum, kwargs: {{min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}}}
trainer: {{max_steps: 2, per_device_train_batch_size: 8, num_generations: 4, max_completion_length: 6}}
subgrids:
  baseline: {{set: {{loss_type: grpo}}}}
  mine: {{set: {{loss_type: {loss}}}, grid: {{{hname}: [0.5, 1.0]}}}}
report: {{hue: [loss_type, {hname}]}}
"""


def subgrid_errors(tmp_path, modules, loss, hname):
    """The load errors of the usual plugin grid: loss_type in a sub-grid, its hyperparameter an axis."""
    path = tmp_path / "grid.yaml"
    path.write_text(SUBGRID.format(modules=modules, loss=loss, hname=hname))
    with pytest.raises(SpecError) as e:
        load_grid(path)
    return list(e.value.problems)


def test_loss_type_typo_reported_beside_the_unknown_hyperparameter(tmp_path, monkeypatch, clean_registry):
    src = PLUGIN.format(name="ok_loss", hname="ok_scale", expr="-inputs.advantages * inputs.per_token_logps")
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "ok_losses", src)))
    errors = subgrid_errors(tmp_path, "[]", "ok_los", "ok_scale")
    (typo,) = [e for e in errors if "loss_type = 'ok_los'" in e]
    assert typo.startswith("subgrids.mine.set.loss_type = 'ok_los' is not a TRL loss type (grpo, ")
    assert "nor a loss plugin (" in typo and "gmpo" in typo
    keys = [e for e in errors if "unknown key 'ok_scale'" in e]
    assert len(keys) == 2 and all("'ok_los' names no plugin (the loss_type error above)" in e for e in keys)
    # the plugin loaded: its key is known, so each cell reports the name, with the close one
    (err,) = plan_errors(tmp_path, "ok_losses", "ok_los")
    assert "'ok_los' is not a TRL loss type" in err and "Did you mean 'ok_loss'?" in err


def test_uninstalled_plugin_named_in_loss_type(tmp_path, clean_registry):
    """No plugins: key, no package: the loss_type is the problem, the axis key follows from it."""
    errors = subgrid_errors(tmp_path, "[]", "absent_loss", "absent_scale")
    assert errors[0].startswith("subgrids.mine.set.loss_type = 'absent_loss' is not a TRL loss type")
    assert "install its package" in errors[0]
    assert all("'absent_loss' names no plugin" in e for e in errors[1:]) and len(errors) == 3


def test_keys_of_a_module_that_did_not_load_follow_from_it(tmp_path, clean_registry):
    errors = subgrid_errors(tmp_path, "[absent_losses]", "absent_loss", "absent_scale")
    assert errors[0].startswith("plugins: module 'absent_losses' not found")
    assert "plugin module 'absent_losses' did not load: see above" in errors[1]
    keys = [e for e in errors if "unknown key 'absent_scale'" in e]
    assert keys and all("plugin module 'absent_losses' did not load (above)" in e for e in keys)


def test_import_error_of_a_listed_entry_point_reported_once(tmp_path, monkeypatch, clean_registry):
    root = tmp_path / "site"
    write_package(root, "bad_losses", "import math\nx = 1 / 0\n")
    info = root / "bad_losses-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-losses\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[grpo_harness.losses]\nbad_loss = bad_losses:f\n")
    monkeypatch.syspath_prepend(str(root))
    errors = subgrid_errors(tmp_path, "[bad_losses]", "bad_loss", "bad_scale")
    assert sum("ZeroDivisionError" in e for e in errors) == 1, errors
    assert errors[0].startswith("plugins: importing 'bad_losses' raised ZeroDivisionError")
    assert not any("'bad_loss' is not a TRL loss type" in e for e in errors)  # it is an entry point
    assert any("unknown key 'bad_scale'" in e and "did not load (above)" in e for e in errors)


def test_wrong_shape_found_at_validation(tmp_path, monkeypatch, clean_registry):
    src = PLUGIN.format(
        name="flat_loss", hname="flat_scale", expr="(inputs.advantages * inputs.per_token_logps).sum(-1)"
    )
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "flat_losses", src)))
    (err,) = plan_errors(tmp_path, "flat_losses", "flat_loss")
    assert "returned a loss of shape (3,) for B=3, T=4; return (B, T) per token or (B, 1)" in err


def test_loss_without_gradient_found_at_validation(tmp_path, monkeypatch, clean_registry):
    src = PLUGIN.format(
        name="dead_loss", hname="dead_scale", expr="inputs.advantages * inputs.old_per_token_logps"
    )
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "dead_losses", src)))
    (err,) = plan_errors(tmp_path, "dead_losses", "dead_loss")
    assert "does not depend on LossInputs.per_token_logps" in err


def test_hyperparameter_clashing_with_grpo_config(tmp_path, monkeypatch, clean_registry):
    src = PLUGIN.format(name="clash_loss", hname="beta", expr="-inputs.per_token_logps")
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "clash_losses", src)))
    errors = plan_errors(tmp_path, "clash_losses", "clash_loss")
    (clash,) = [
        e for e in errors if "declares hyperparameter 'beta', which is a GRPOConfig field; rename it" in e
    ]
    assert "or read inputs.config.beta (LossInputs.config) instead" in clash and "args." not in clash


def test_hyperparameter_range_and_owner(tmp_path, monkeypatch, clean_registry):
    src = PLUGIN.format(name="r_loss", hname="r_scale", expr="-inputs.per_token_logps")
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "r_losses", src)))
    (err,) = plan_errors(tmp_path, "r_losses", "r_loss", ", r_scale: -1.0")
    assert err.startswith("trainer.r_scale = -1.0 must be >= 0 (a scale)")
    (err,) = plan_errors(tmp_path, "r_losses", "grpo", ", r_scale: 2.0")
    assert "hyperparameter of loss plugin 'r_loss', but loss_type = 'grpo' does not read it" in err
    (err,) = plan_errors(tmp_path, "r_losses", "r_loss", ", r_scale: fast")
    assert "trainer.r_scale = 'fast' has type str; expected float" in err
    assert plan_errors(tmp_path, "r_losses", "r_loss", ", r_scale: 3") == []


def test_builtin_runs_keep_their_settings_and_config(tmp_path):
    """A built-in run's settings hold no plugin default, and GRPOConfig gets a plugin's reduction."""
    from harness.losses import grpo_config_kwargs

    path = tmp_path / "grid.yaml"
    path.write_text(GRID.format(module="harness.losses.mirrors", loss="gmpo", extra=", gmpo_clip_low: 0.3"))
    (run,) = expand(load_grid(path)).runs
    kwargs = grpo_config_kwargs(run, "cpu", "out")
    assert kwargs["loss_type"] == "grpo" and "gmpo_clip_low" not in kwargs
    assert run.settings["trainer"]["gmpo_clip_low"] == 0.3
    path.write_text(GRID.format(module="harness.losses.mirrors", loss="grpo", extra=""))
    (plain,) = expand(load_grid(path)).runs
    assert "gmpo_clip_low" not in plain.settings["trainer"]
    assert plain.run_id == plain.with_settings({"plugins": ["x"]}).run_id  # plugins: is not identity


def test_entry_point_discovery(tmp_path, monkeypatch, clean_registry):
    """A distribution on sys.path whose entry point names a loss: found by loss_type alone."""
    root = tmp_path / "site"
    write_package(
        root, "ep_losses", PLUGIN.format(name="ep_loss", hname="ep_scale", expr="-inputs.per_token_logps")
    )
    info = root / "ep_losses-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-losses\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[grpo_harness.losses]\nep_loss = ep_losses:f\n")
    monkeypatch.syspath_prepend(str(root))
    assert "ep_loss" in losses.entry_point_names() and "ep_losses" not in sys.modules
    path = tmp_path / "grid.yaml"
    path.write_text(GRID.format(module="harness.losses.mirrors", loss="ep_loss", extra=", ep_scale: 2.0"))
    plan = expand(load_grid(path))
    assert validate_plan(plan).ok and "ep_losses" in sys.modules
    assert losses.REGISTRY["ep_loss"].module == "ep_losses"
    record = losses.source_record(losses.REGISTRY["ep_loss"])
    assert (record["distribution"], record["version"]) == ("ep-losses", "0.1")
    assert record["file"] == str(root / "ep_losses" / "__init__.py") and len(record["sha256"]) == 64


def test_plugin_source_recorded_and_a_change_warned_of(tmp_path, monkeypatch, capsys, clean_registry):
    """A plugin run's provenance names its code; a done run whose code changed is skipped with a warning."""
    import hashlib
    import json

    from harness.cli import main
    from harness.train.training import _start

    src = PLUGIN.format(name="src_loss", hname="src_scale", expr="-inputs.per_token_logps")
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "src_losses", src)))
    path = tmp_path / "grid.yaml"
    path.write_text(GRID.format(module="src_losses", loss="src_loss", extra=""))
    (run,) = expand(load_grid(path)).runs
    results = tmp_path / "results"
    run_dir = layout.run_dir(results / "t", run.run_id)
    _start(run, run_dir, "cpu", 1)
    record = json.loads((run_dir / layout.PROVENANCE_FILE).read_text())["loss_plugin"]
    file = tmp_path / "p" / "src_losses" / "__init__.py"
    assert record["module"] == "src_losses" and Path(record["file"]) == file
    assert record["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    (run_dir / layout.DONE_FILE).write_text("")
    argv = ["run", str(path), "--results", str(results), "--no-report"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "skipped 1 run(s): done" in out.out and "warning" not in out.err
    file.write_text(file.read_text().replace("-inputs.per_token_logps", "-2 * inputs.per_token_logps"))
    assert main(argv) == 0
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert (
        f"loss plugin src_loss's source ({file}) changed since 1 done run(s) trained with it: {run.run_id}"
        in (warning)
    )
    assert "--results DIR" in warning and str(run_dir) in warning


def test_project_entry_points_register_the_variants():
    names = losses.entry_point_names()
    assert {"gmpo", "kl_cov", "clip_cov"} <= set(names)


# --- hand-computed values of the variants ---------------------------------------------------------


def variant_inputs(log_ratio, advantages, logps=None, mask=None, **hparams):
    from types import SimpleNamespace

    from harness.losses.compute import LossInputs

    lr = torch.tensor(log_ratio)
    logps = (torch.full_like(lr, -1.0) if logps is None else torch.tensor(logps)).requires_grad_(True)
    old = logps.detach() - lr
    mask = torch.ones_like(lr, dtype=torch.int32) if mask is None else torch.tensor(mask, dtype=torch.int32)
    adv = torch.tensor(advantages).unsqueeze(1)
    return LossInputs(
        logps, old, None, adv, mask, logps - old, logps - old, None, torch.zeros_like(lr), 0.2, 0.2,
        SimpleNamespace(delta=None), hparams,
    )  # fmt: skip


def test_gmpo_by_hand():
    from harness.losses.variants import gmpo

    # A > 0: token 0's log-ratio 0.5 clips to 0.4, token 1 keeps -0.1: exp(mean) = exp(0.15)
    # A < 0: pessimistic for a negative advantage, the ratio above the range is kept: exp((0.5 - 0.1) / 2)
    inputs = variant_inputs([[0.5, -0.1], [0.5, -0.1]], [1.0, -1.0], gmpo_clip_low=0.4, gmpo_clip_high=0.4)
    out = gmpo(inputs)
    assert out.loss.shape == (2, 1)
    assert out.loss[0, 0].item() == pytest.approx(-math.exp(0.15), abs=1e-6)
    assert out.loss[1, 0].item() == pytest.approx(math.exp(0.2), abs=1e-6)
    out.loss.sum().backward()
    grad = inputs.per_token_logps.grad
    # d/dlogp_t of -A exp(mean l~): zero where clipped, -A exp(.) / |o| elsewhere
    assert grad[0].tolist() == pytest.approx([0.0, -math.exp(0.15) / 2], abs=1e-6)
    assert grad[1].tolist() == pytest.approx([math.exp(0.2) / 2, math.exp(0.2) / 2], abs=1e-6)
    assert out.metrics["gmpo/clip_ratio/high"].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert out.metrics["gmpo/clip_ratio/low"].tolist() == [[0.0, 0.0], [1.0, 0.0]]


def test_kl_cov_by_hand():
    from harness.losses.variants import kl_cov

    # advantages (1, -1), log-probs [[-1, -2], [-3, -0.5]]: means 0 and -1.625, so the centred
    # products are [[0.625, -0.375], [1.375, -1.125]]; a quarter of 4 tokens = 1 token, (1, 0), is penalised
    log_ratio = [[0.1, -0.2], [0.3, 0.05]]
    inputs = variant_inputs(
        log_ratio, [1.0, -1.0], logps=[[-1.0, -2.0], [-3.0, -0.5]], kl_cov_ratio=0.25, kl_cov_coef=2.0
    )
    out = kl_cov(inputs)
    expected = [
        [-math.exp(0.1), -math.exp(-0.2)],
        [math.exp(0.3) + 2.0 * 0.3, math.exp(0.05)],
    ]
    assert out.loss.tolist() == [pytest.approx(row, abs=1e-6) for row in expected]
    assert out.metrics["kl_cov/selected_frac"].tolist() == [[0.0, 0.0], [1.0, 0.0]]
    assert out.metrics["kl_cov/cov_mean"].item() == pytest.approx(
        (0.625 - 0.375 + 1.375 - 1.125) / 4, abs=1e-6
    )


def test_kl_cov_ignores_masked_tokens():
    from harness.losses.variants import kl_cov

    inputs = variant_inputs(
        [[0.1, 0.9], [0.0, 0.0]], [1.0, -1.0], logps=[[-1.0, -9.0], [-3.0, -3.0]],
        mask=[[1, 0], [0, 0]], kl_cov_ratio=1.0, kl_cov_coef=1.0,
    )  # fmt: skip
    assert kl_cov(inputs).metrics["kl_cov/selected_frac"].tolist() == [[1.0, 0.0], [0.0, 0.0]]


CLIP_COV = {"clip_cov_ratio": 0.25, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}


def test_clip_cov_by_hand():
    from harness.losses.variants import clip_cov

    # the centred products of test_kl_cov_by_hand: only token (1, 0), 1.375, lies in the band (1, 5);
    # its ratio e^0.3 is not PPO-clipped for A = -1 (the unclipped term is the active one), so it is cut
    inputs = variant_inputs(
        [[0.1, -0.2], [0.3, 0.05]], [1.0, -1.0], logps=[[-1.0, -2.0], [-3.0, -0.5]], **CLIP_COV
    )
    out = clip_cov(inputs)
    expected = [[-math.exp(0.1), -math.exp(-0.2)], [0.0, math.exp(0.05)]]
    assert out.loss.tolist() == [pytest.approx(row, abs=1e-6) for row in expected]
    out.loss.sum().backward()
    assert inputs.per_token_logps.grad[1, 0].item() == 0.0 and inputs.per_token_logps.grad[1, 1].item() != 0.0
    assert out.metrics["clip_cov/cut_frac"].tolist() == [[0.0, 0.0], [1.0, 0.0]]
    assert out.metrics["clip_cov/band_frac"].tolist() == [[0.0, 0.0], [1.0, 0.0]]
    # a ratio e^-0.5 below 1 - 0.2 with A = -1 is PPO-clipped already: nothing is left to cut
    clipped = clip_cov(
        variant_inputs(
            [[0.1, -0.2], [-0.5, 0.05]], [1.0, -1.0], logps=[[-1.0, -2.0], [-3.0, -0.5]], **CLIP_COV
        )
    )
    assert clipped.loss[1].tolist() == pytest.approx([0.8, math.exp(0.05)], abs=1e-6)
    assert clipped.metrics["clip_cov/cut_frac"].sum().item() == 0.0
    assert clipped.metrics["clip_ratio/low_mean"][1, 0].item() == 1.0


def test_clip_cov_draws_k_of_the_band_with_torch_generator():
    from harness.losses.variants import clip_cov

    # advantages (1, -1), log-probs [[-1, -1, -1], [-4, -4, -4]]: every centred product is 1.5 * 1.5 = 2.25
    args = ([[0.0] * 3, [0.0] * 3], [1.0, -1.0])
    kw = {"logps": [[-1.0] * 3, [-4.0] * 3], **CLIP_COV, "clip_cov_ratio": 0.2}  # int(6 * 0.2) = 1 token
    cuts = []
    for _ in range(2):
        torch.manual_seed(7)
        cuts.append(clip_cov(variant_inputs(*args, **kw)).metrics["clip_cov/cut_frac"])
    assert cuts[0].sum().item() == 1.0 and torch.equal(cuts[0], cuts[1])
    kw["clip_cov_ratio"] = 0.5
    assert clip_cov(variant_inputs(*args, **kw)).metrics["clip_cov/cut_frac"].sum().item() == 3.0


def test_clip_cov_empty_band_is_refused_at_plan(tmp_path):
    (err,) = plan_errors(
        tmp_path, "harness.losses.mirrors", "clip_cov", ", clip_cov_lb: 5.0, clip_cov_ub: 1.0"
    )
    assert "clip_cov_lb = 5.0 must be below clip_cov_ub = 1.0" in err and "before anything ran" in err


# --- the doc's example, as a new user would run it -------------------------------------------------


@pytest.mark.slow
def test_the_docs_example_end_to_end(tmp_path, model_cache):
    blocks = doc_blocks()
    pkg = tmp_path / "my-losses"
    write_package(pkg, "my_losses", blocks["python"])
    (pkg / "pyproject.toml").write_text(blocks["toml"])
    grid = tmp_path / "my_reinforce.yaml"
    grid.write_text(blocks["yaml"])
    import os

    os.environ["PYTHONPATH"] = os.pathsep.join([str(pkg), str(REPO)])
    fast = [f"-otiny.{k}={v}" for k, v in FAST_TINY.items()]
    fast += ["-otask.train_size=256", "-otrainer.max_steps=3", "-otrainer.per_device_train_batch_size=8"]
    fast += ["-otrainer.num_generations=4", "-oharness.eval_steps=0", "-oharness.samples_steps=0"]
    try:
        plan = cli("plan", str(grid), *fast).stdout
        assert "loss plugin my_reinforce (my_losses, reduction dapo" in plan
        assert "my_reinforce_scale: float = 1.0, > 0: multiplier of the advantage [here: 0.5, 1.0]" in plan
        assert "  reads: none of epsilon, epsilon_high, delta, importance_sampling_level" in plan
        results = tmp_path / "results"
        cli("run", str(grid), "--results", str(results), "--executor", "debug", *fast)
    finally:
        del os.environ["PYTHONPATH"]
    runs = sorted((results / "my_reinforce" / layout.RUNS_DIR).iterdir())
    assert len(runs) == 3
    frames = [pq.read_table(r / layout.METRICS_DIR / layout.COMPACT_FILE).to_pandas() for r in runs]
    with_metric = [df for df in frames if "my_reinforce/logp" in df.columns]
    assert len(with_metric) == 2 and all(df["my_reinforce/logp"].notna().all() for df in with_metric)
    index = (results / "my_reinforce" / layout.REPORT_DIR / "index.md").read_text()
    assert "my_reinforce" in index
    dynamics = list((results / "my_reinforce" / layout.REPORT_DIR).glob("dynamics*.png"))
    assert dynamics


def test_two_plugins_declaring_one_hyperparameter_are_refused(tmp_path, monkeypatch, clean_registry):
    """One key would set both plugins' value: the second registration is refused, naming both."""
    src = PLUGIN.format(name="gmpo_twin", hname="gmpo_clip_low", expr="-inputs.per_token_logps")
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "twin_losses", src)))
    errors = plan_errors(tmp_path, "twin_losses", "gmpo_twin", overrides=["trainer.loss_type=gmpo"])
    assert any(
        "and 'gmpo_twin' (twin_losses) both declare hyperparameter 'gmpo_clip_low'; rename one" in e
        for e in errors
    ), errors


def test_plugins_naming_a_path_or_a_module_without_losses(tmp_path, monkeypatch, clean_registry):
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "no_losses", "X = 1\n")))
    (err,) = [e for e in plan_errors(tmp_path, "no_losses", "grpo") if "no_losses" in e]
    assert err.startswith("plugins: module 'no_losses' registers no loss and no reward; decorate")
    (err,) = [e for e in plan_errors(tmp_path, "./p/no_losses.py", "grpo") if "no_losses" in e]
    assert "is a file path; list the module's import name instead" in err


def test_a_listed_module_cannot_take_an_installed_plugins_name(tmp_path, monkeypatch, clean_registry):
    """gmpo is the project's entry point: a module registering its own gmpo (the entry point not yet
    loaded) is refused, naming both, instead of silently replacing it."""
    losses.REGISTRY.pop("gmpo", None)
    src = PLUGIN.format(name="gmpo", hname="shadow_scale", expr="-inputs.per_token_logps")
    monkeypatch.syspath_prepend(str(write_package(tmp_path / "p", "shadow_losses", src)))
    errors = plan_errors(tmp_path, "shadow_losses", "gmpo")
    (err,) = [e for e in errors if "shadow_losses" in e]
    assert "registers loss 'gmpo', a name the installed package grpo-harness also gives" in err
    assert "entry point gmpo = harness.losses.variants:gmpo" in err and "Rename yours" in err
