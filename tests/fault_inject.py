"""Train one run in this process and SIGKILL it at a named moment (for tests/test_faults.py).

    python tests/fault_inject.py SPEC.pkl RUN_DIR POINT

POINT is one of:

- ``none``: train to the end;
- ``step:N``: right after step N's metrics row is written;
- ``state:N``: inside the checkpoint save of step N, as transformers writes trainer_state.json
  (last, not atomically): the file is left empty;
- ``marker:N``: after the checkpoint of step N is saved, before its completion marker;
- ``compact-write``: inside the final compaction, while metrics.parquet is being written;
- ``compact-parts``: inside the final compaction, after metrics.parquet is written and before
  the parts are removed.

A SIGKILL cannot be caught: nothing of the harness runs after it, as with ``kill -9``.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from pathlib import Path


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str) -> None:
    kind, _, n = point.partition(":")
    step = int(n) if n else None
    if kind == "step":
        from harness.train import recorder

        on_log = recorder._StepRecorder.on_log

        def killed_on_log(self, args, state, control, logs=None, **kw):
            on_log(self, args, state, control, logs=logs, **kw)
            if state.global_step == step and "train_runtime" not in (logs or {}):
                die()

        recorder._StepRecorder.on_log = killed_on_log
    elif kind == "state":
        from transformers.trainer_callback import TrainerState

        save = TrainerState.save_to_json

        def killed_save(self, json_path):
            if self.global_step == step and os.path.basename(os.path.dirname(json_path)).startswith(
                "checkpoint-"
            ):
                open(json_path, "w").close()
                die()
            save(self, json_path)

        TrainerState.save_to_json = killed_save
    elif kind == "marker":
        from harness.train import checkpoints

        mark = checkpoints.mark_complete

        def killed_mark(ckpt, at):
            if at == step:
                die()
            mark(ckpt, at)

        checkpoints.mark_complete = killed_mark
    elif kind in ("compact-write", "compact-parts"):
        from harness import layout
        from harness.train import metrics

        write = metrics._atomic_write_table

        def killed_write(table, path):
            if Path(path).name != layout.COMPACT_FILE:
                return write(table, path)
            if kind == "compact-write":
                with layout.atomic_path(path) as tmp:
                    import pyarrow.parquet as pq

                    pq.write_table(table, tmp)
                    die()
            write(table, path)
            die()

        metrics._atomic_write_table = killed_write
    elif kind != "none":
        raise SystemExit(f"unknown point {point!r}")


def main() -> None:
    spec_path, run_dir, point = sys.argv[1:4]
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    install(point)
    from harness.train.training import train

    train(spec, Path(run_dir), device="cpu", threads=1)


if __name__ == "__main__":
    main()
