"""Micro-benchmarks of GRPO loss code: ``grpo-harness bench vespo`` and ``grpo-harness bench losses``.

``bench vespo`` times TRL's ``GRPOTrainer.get_gamma_weights`` against a reference implementation of the
official VESPO algorithm (after checking that both give the same weights); ``bench losses`` times
forward + backward of TRL's whole ``GRPOTrainer._compute_loss`` for every loss type. Tables go to stdout
and, as markdown and CSV, to ``<out>/<device>/`` (``cpu`` or the GPU name as a slug).

Importing this package is cheap (no torch, no TRL): the CLI builds its parser from :func:`add_arguments`
and only :func:`main` loads the heavy modules. The building blocks live in the submodules
:mod:`harness.bench.vespo`, :mod:`harness.bench.probe`, :mod:`harness.bench.losses`,
:mod:`harness.bench.common` and :mod:`harness.bench.settings` (shapes, timing settings and presets, no torch); the most used names are also reachable here (loaded on first access).
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.bench.settings import PRESETS

if TYPE_CHECKING:  # annotations only: importing this package must not load torch
    import torch

    from harness.bench.common import BenchRun

DEFAULT_OUT = "results/bench"

# Names re-exported lazily from the submodules, so that `from harness import bench` stays light.
_LAZY = {
    "LossVariant": "settings",
    "LOSS_VARIANTS": "settings",
    "make_loss_stand_in": "probe",
    "reference_gamma_weights": "vespo",
    "trl_gamma_weights": "vespo",
    "check_equivalence": "vespo",
    "EquivalenceError": "vespo",
    "run_vespo": "vespo",
    "run_losses": "losses",
    "REPORTED_SIZES": "settings",
    "PRESETS": "settings",
    "TimingSettings": "settings",
    "parse_sizes": "settings",
    "BenchRun": "common",
}

__all__ = ["DEFAULT_OUT", "add_arguments", "main", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"harness.bench.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'harness.bench' has no attribute {name!r}")


def _sizes_arg(text: str) -> list[tuple[int, int]]:
    from harness.bench.settings import parse_sizes

    try:
        return parse_sizes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


# An option: its flags and the keyword arguments of ``add_argument``.
OptionSpec = tuple[tuple[str, ...], dict[str, Any]]


def _input_options() -> list[OptionSpec]:
    """Where the benchmark runs, on what inputs, and where its tables go."""
    return [
        (
            ("--device",),
            {
                "choices": ("auto", "cpu", "cuda"),
                "default": "auto",
                "help": "where to run (auto: CUDA when available, else CPU)",
            },
        ),
        (
            ("--sizes",),
            {
                "type": _sizes_arg,
                "default": None,
                "metavar": "BxT,...",
                "help": "comma-separated B x T shapes, e.g. 8x128,16x256 (default: the preset's; --full uses "
                "the 8 shapes reported for TRL pull request #5199)",
            },
        ),
    ]


def _effort_options() -> list[OptionSpec]:
    """Measurement settings overriding the preset's (see :class:`harness.bench.settings.TimingSettings`)."""
    quick, full = PRESETS["quick"].timing, PRESETS["full"].timing
    return [
        (
            ("--repeats",),
            {
                "type": _positive_int,
                "default": None,
                "help": "timed blocks per implementation, at least "
                f"(default: preset's, {quick.repeats} quick / {full.repeats} full)",
            },
        ),
        (
            ("--min-run-time",),
            {
                "type": _positive_float,
                "default": None,
                "metavar": "SECONDS",
                "help": "seconds of timed calls per implementation, at least "
                f"(default: preset's, {quick.min_run_time} quick / {full.min_run_time} full)",
            },
        ),
        (
            ("--max-time",),
            {
                "type": _positive_float,
                "default": None,
                "metavar": "SECONDS",
                "help": "wall-clock budget per implementation and shape, after which timing stops early "
                f"(default: preset's, {quick.max_time:g} quick / {full.max_time:g} full)",
            },
        ),
    ]


def _run_options() -> list[OptionSpec]:
    """Threads, dtype, seed and results folder."""
    return [
        (
            ("--threads",),
            {
                "type": _positive_int,
                "default": None,
                "help": "intra-op threads for torch (default: torch's current setting)",
            },
        ),
        (
            ("--dtype",),
            {
                "choices": ("float32", "bfloat16"),
                "default": "float32",
                "help": "dtype of the timed token tensors (the VESPO agreement check always runs in float32 too)",
            },
        ),
        (("--seed",), {"type": int, "default": 0, "help": "seed of the synthetic inputs"}),
        (
            ("--out",),
            {
                "type": Path,
                "default": Path(DEFAULT_OUT),
                "help": f"results folder; tables go to <out>/<device>/ (default: {DEFAULT_OUT})",
            },
        ),
    ]


def _add_presets(parser: argparse.ArgumentParser) -> None:
    """The mutually exclusive ``--quick`` (default) and ``--full`` flags, stored in ``args.preset``."""
    quick, full = PRESETS["quick"], PRESETS["full"]
    effort = parser.add_mutually_exclusive_group()
    effort.add_argument(
        "--quick",
        dest="preset",
        action="store_const",
        const="quick",
        help=f"{len(quick.sizes)} shapes, short measurements; under a minute on 2 CPU cores (default)",
    )
    effort.add_argument(
        "--full",
        dest="preset",
        action="store_const",
        const="full",
        help=f"the {len(full.sizes)} reported shapes, longer measurements (a few minutes on CPU)",
    )
    parser.set_defaults(preset="quick")


def _shared_options() -> argparse.ArgumentParser:
    """The options both sub-commands take, as a parent parser, in the order ``--help`` lists them."""
    shared = argparse.ArgumentParser(add_help=False)
    for flags, kwargs in _input_options():
        shared.add_argument(*flags, **kwargs)
    _add_presets(shared)
    for flags, kwargs in [*_effort_options(), *_run_options()]:
        shared.add_argument(*flags, **kwargs)
    return shared


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``vespo`` and ``losses`` sub-commands and their options to ``parser``.

    The chosen sub-command is stored in ``args.bench_command``; pass the parsed namespace to :func:`main`.

    Args:
        parser: the (sub)parser of the ``bench`` command.
    """
    shared = _shared_options()
    commands = parser.add_subparsers(dest="bench_command", metavar="{vespo,losses}", required=True)
    commands.add_parser(
        "vespo",
        parents=[shared],
        help="time TRL's VESPO gamma weights against the official algorithm (checked equal first)",
        description="Check that TRL's GRPOTrainer.get_gamma_weights and a reference implementation of the "
        "official VESPO algorithm agree (fp32 relative difference <= 1e-5; exit status 1 otherwise), then time "
        "both per call, with and without a token-level IS ratio.",
    )
    losses = commands.add_parser(
        "losses",
        parents=[shared],
        help="time forward + backward of TRL's GRPO loss for every loss type",
        description="Time TRL's GRPOTrainer._compute_loss plus backward for grpo, dr_grpo, dapo, bnpo, cispo, "
        "sapo, luspo, vespo and gspo (grpo with sequence-level importance sampling), with a stand-in trainer.",
    )
    losses.add_argument(
        "--variants",
        default=None,
        metavar="NAME,...",
        help="comma-separated subset of grpo,dr_grpo,dapo,bnpo,cispo,sapo,luspo,vespo,gspo (default: all)",
    )


def main(args: argparse.Namespace) -> int:
    """Run the ``bench`` sub-command held in ``args`` (from a parser set up by :func:`add_arguments`).

    Prints the markdown table(s) to stdout and writes ``vespo.md``/``vespo.csv`` or
    ``losses.md``/``losses.csv`` under ``<out>/<device>/``.

    Args:
        args: parsed arguments.

    Returns:
        0 on success; 1 if TRL's and the reference VESPO weights disagree (nothing is timed then);
        2 on a usage problem (CUDA requested but absent, unknown loss variant).
    """
    import torch

    from harness.bench import common

    command = getattr(args, "bench_command", None)
    if command not in ("vespo", "losses"):
        print("error: choose a bench sub-command: vespo or losses", file=sys.stderr)
        return 2
    try:
        device = common.resolve_device(args.device)
    except (RuntimeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    run = _bench_run(args, device, torch.get_num_threads())
    shapes = ", ".join(common.format_shape(s) for s in run.sizes)
    print(f"bench {command} on {device} ({run.num_threads} threads): {shapes}", file=sys.stderr)
    if command == "vespo":
        status, report = _run_vespo(run)
        written = ("vespo.md", "vespo.csv")
    else:
        status, report = _run_losses(run, args.variants)
        written = ("losses.md", "losses.csv")
    if status:
        return status
    print(report)
    print(f"wrote {', '.join(str(run.out_dir / name) for name in written)}", file=sys.stderr)
    return 0


def _bench_run(args: argparse.Namespace, device: torch.device, num_threads: int) -> BenchRun:
    """The :class:`harness.bench.common.BenchRun` the parsed options ask for (preset, then overrides)."""
    import torch

    from harness.bench import common

    preset = PRESETS[args.preset]
    timing = preset.timing.overridden(
        repeats=args.repeats, min_run_time=args.min_run_time, max_time=args.max_time
    )
    return common.BenchRun(
        device=device,
        sizes=args.sizes or list(preset.sizes),
        timing=timing,
        num_threads=num_threads,
        dtype={"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype],
        seed=args.seed,
        preset=preset.name if args.sizes is None else f"{preset.name} (custom sizes)",
        out_dir=Path(args.out) / common.device_slug(device),
    )


def _run_vespo(run: BenchRun) -> tuple[int, str]:
    """``bench vespo``: (0, report), or (1, "") after saying why when the implementations disagree."""
    from harness.bench.vespo import EquivalenceError, run_vespo

    try:
        return 0, run_vespo(run)
    except EquivalenceError as error:
        print(f"FAILED: {error}", file=sys.stderr)
        print("Nothing was timed: the two implementations must agree first.", file=sys.stderr)
        return 1, ""


def _run_losses(run: BenchRun, variants_option: str | None) -> tuple[int, str]:
    """``bench losses``: (0, report), or (2, "") after saying why when a variant name is unknown."""
    from harness.bench.losses import run_losses

    variants = None
    if variants_option:
        variants = [name.strip() for name in variants_option.split(",") if name.strip()]
    try:
        return 0, run_losses(run, variants)
    except KeyError as error:
        print(f"error: {error.args[0]}", file=sys.stderr)
        return 2, ""
