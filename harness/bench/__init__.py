"""Micro-benchmarks of GRPO loss code: ``grpo-harness bench vespo`` and ``grpo-harness bench losses``.

``bench vespo`` times TRL's ``GRPOTrainer.get_gamma_weights`` against a reference implementation of the
official VESPO algorithm (after checking that both give the same weights); ``bench losses`` times
forward + backward of TRL's whole ``GRPOTrainer._compute_loss`` for every loss type. Tables go to stdout
and, as markdown and CSV, to ``<out>/<device>/`` (``cpu`` or the GPU name as a slug).

Importing this package is cheap (no torch, no TRL): the CLI builds its parser from :func:`add_arguments`
and only :func:`main` loads the heavy modules. The building blocks live in the submodules
:mod:`harness.bench.vespo`, :mod:`harness.bench.probe`, :mod:`harness.bench.losses` and
:mod:`harness.bench.common`; the most used names are also reachable here (loaded on first access).
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

DEFAULT_OUT = "results/bench"

# Names re-exported lazily from the submodules, so that `from harness import bench` stays light.
_LAZY = {
    "LossProbe": "probe",
    "LossBatch": "probe",
    "LossVariant": "probe",
    "LOSS_VARIANTS": "probe",
    "make_loss_batch": "probe",
    "make_loss_stand_in": "probe",
    "reference_gamma_weights": "vespo",
    "trl_gamma_weights": "vespo",
    "check_equivalence": "vespo",
    "EquivalenceError": "vespo",
    "run_vespo": "vespo",
    "run_losses": "losses",
    "REPORTED_SIZES": "common",
    "PRESETS": "common",
    "parse_sizes": "common",
}

__all__ = ["DEFAULT_OUT", "add_arguments", "main", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"harness.bench.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'harness.bench' has no attribute {name!r}")


def _sizes_arg(text: str) -> list[tuple[int, int]]:
    from harness.bench.common import parse_sizes

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


def _shared_options() -> argparse.ArgumentParser:
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where to run (auto: CUDA when available, else CPU)",
    )
    shared.add_argument(
        "--sizes",
        type=_sizes_arg,
        default=None,
        metavar="BxT,...",
        help="comma-separated B x T shapes, e.g. 8x128,16x256 (default: the preset's; --full uses the 8 "
        "shapes reported for TRL pull request #5199)",
    )
    effort = shared.add_mutually_exclusive_group()
    effort.add_argument(
        "--quick",
        dest="preset",
        action="store_const",
        const="quick",
        help="3 shapes, short measurements; under a minute on 2 CPU cores (default)",
    )
    effort.add_argument(
        "--full",
        dest="preset",
        action="store_const",
        const="full",
        help="the 8 reported shapes, longer measurements (a few minutes on CPU)",
    )
    shared.set_defaults(preset="quick")
    shared.add_argument(
        "--repeats",
        type=_positive_int,
        default=None,
        help="timed blocks per implementation, at least (default: preset's, 10 quick / 30 full)",
    )
    shared.add_argument(
        "--min-run-time",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds of timed calls per implementation, at least (default: preset's, 0.25 quick / 1.0 full)",
    )
    shared.add_argument(
        "--max-time",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="wall-clock budget per implementation and shape, after which timing stops early "
        "(default: preset's, 1 quick / 6 full)",
    )
    shared.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="intra-op threads for torch (default: torch's current setting)",
    )
    shared.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="dtype of the timed token tensors (the VESPO agreement check always runs in float32 too)",
    )
    shared.add_argument("--seed", type=int, default=0, help="seed of the synthetic inputs")
    shared.add_argument(
        "--out",
        type=Path,
        default=Path(DEFAULT_OUT),
        help=f"results folder; tables go to <out>/<device>/ (default: {DEFAULT_OUT})",
    )
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
    num_threads = torch.get_num_threads()
    preset = common.PRESETS[args.preset]
    sizes = args.sizes or list(preset.sizes)
    min_run_time = args.min_run_time or preset.min_run_time
    repeats = args.repeats or preset.repeats
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    out_dir = Path(args.out) / common.device_slug(device)
    settings = {
        "device": device,
        "sizes": sizes,
        "min_run_time": min_run_time,
        "repeats": repeats,
        "num_threads": num_threads,
        "block_time": preset.block_time,
        "max_time": preset.max_time if args.max_time is None else args.max_time,
        "dtype": dtype,
        "seed": args.seed,
        "preset": preset.name if args.sizes is None else f"{preset.name} (custom sizes)",
        "out_dir": out_dir,
    }
    shapes = ", ".join(common.format_shape(s) for s in sizes)
    print(f"bench {command} on {device} ({num_threads} threads): {shapes}", file=sys.stderr)

    if command == "vespo":
        from harness.bench.vespo import EquivalenceError, run_vespo

        try:
            report = run_vespo(**settings)
        except EquivalenceError as error:
            print(f"FAILED: {error}", file=sys.stderr)
            print("Nothing was timed: the two implementations must agree first.", file=sys.stderr)
            return 1
        written = ("vespo.md", "vespo.csv")
    else:
        from harness.bench.losses import run_losses

        variants = None
        if args.variants:
            variants = [name.strip() for name in args.variants.split(",") if name.strip()]
        try:
            report = run_losses(variants=variants, **settings)
        except KeyError as error:
            print(f"error: {error.args[0]}", file=sys.stderr)
            return 2
        written = ("losses.md", "losses.csv")
    print(report)
    print(f"wrote {', '.join(str(out_dir / name) for name in written)}", file=sys.stderr)
    return 0
