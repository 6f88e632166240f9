"""``python -m harness.bench {vespo,losses} ...``: the ``bench`` command without the full CLI."""

from __future__ import annotations

import argparse

from harness.bench import add_arguments, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m harness.bench", description="Micro-benchmarks of TRL's GRPO loss code."
    )
    add_arguments(parser)
    raise SystemExit(main(parser.parse_args()))
