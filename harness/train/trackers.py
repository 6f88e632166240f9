"""Experiment trackers (``trainer.report_to``): one tracker run per harness run, named from the grid.

transformers' integrations do the logging (``WandbCallback``, ``TrackioCallback``,
``TensorBoardCallback``: rank 0 only, every value TRL logs). The harness adds what they cannot know:

* names from the grid (:func:`tracker_run`): project = the grid's name, group = the variant's label
  (its sub-grid and its values on the keys the grid varies, seed left out), name = label + seed,
  tags = the keys the grid varies, config = the run's settings and run id;
* one tracker run per harness run, continued by a resumed or requeued attempt: W&B's run id is the
  harness run id (``resume="allow"``), trackio resumes the run of the same name in the same project,
  TensorBoard writes to the same folder, ``<results>/<grid>/tensorboard/<name>``;
* the harness's own per-step values (``w_seq`` statistics, ``off_policy``, ``policy_lag``,
  ``reuse_index``, token counts, step time) beside TRL's: the run's recording callback runs before
  the trackers' and adds them to the step's logs (:func:`harness.train.recorder._StepRecorder.on_log`).

Where the data go: W&B to ``$WANDB_DIR`` or the run's folder (``WANDB_MODE=offline`` keeps it
there); trackio to its local database (``$TRACKIO_DIR``, default ``~/.cache/huggingface/trackio``);
TensorBoard to the grid's folder. Steps trained again after a resume are logged again (the metrics
parquet keeps one row per step; a tracker's history may hold the steps between the last checkpoint
and a kill twice).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The trackers whose runs the harness names and continues; other report_to names pass to
#: transformers as written.
NAMED = ("wandb", "trackio", "tensorboard")
#: Where TensorBoard's folders go, inside the grid's results folder.
TENSORBOARD_DIR = "tensorboard"


@dataclass(frozen=True)
class TrackerRun:
    """How a harness run appears in a tracker.

    Attributes:
        id: the harness run id (W&B's run id).
        project: the grid's name.
        group: the variant's label: ``"<subgrid>: key=value, ..."`` over the keys the grid varies
            (seed left out; leaf names, e.g. ``loss_type=dapo, r=8``); the grid's name when only the
            seed varies.
        name: ``"<group>, seed=<seed>"``.
        tags: the keys the grid varies (dotted), in the grid's order.
        config: ``{"run_id", "grid", "subgrid", "varying", "settings"}`` (JSON data).
    """

    id: str
    project: str
    group: str
    name: str
    tags: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)


def tracker_run(spec: Any) -> TrackerRun:
    """:class:`TrackerRun` of a :class:`harness.settings.runs.RunSpec`."""
    values = [f"{k.split('.')[-1]}={v}" for k, v in spec.varying.items() if k != "seed"]
    label = ", ".join(values)
    if spec.subgrid:
        label = f"{spec.subgrid}: {label}" if label else spec.subgrid
    label = label or spec.grid
    return TrackerRun(
        id=spec.run_id,
        project=spec.grid,
        group=label,
        name=f"{label}, seed={spec.seed}",
        tags=tuple(spec.varying),
        config={
            "run_id": spec.run_id,
            "grid": spec.grid,
            "subgrid": spec.subgrid,
            "varying": dict(spec.varying),
            "settings": spec.to_json(),
        },
    )


def report_to(value: Any) -> list[str]:
    """``trainer.report_to`` as a list of names (``None``, ``"none"`` and ``[]`` give ``[]``)."""
    if value is None or value == "none":
        return []
    names = [value] if isinstance(value, str) else list(value)
    return [n for n in names if n != "none"]


def named(value: Any) -> list[str]:
    """The trackers of ``report_to`` that the harness names (:data:`NAMED`); ``all`` names each one
    that is installed, as transformers does."""
    names = report_to(value)
    if "all" in names:
        import importlib.util

        return [n for n in NAMED if importlib.util.find_spec(n) is not None]
    return [n for n in NAMED if n in names]


def folder_name(name: str) -> str:
    """``name`` as one folder name: runs of characters other than letters, digits, ``.=_+-`` become
    ``_`` (``"loss_type=dapo, seed=0"`` gives ``"loss_type=dapo_seed=0"``)."""
    return re.sub(r"[^\w.=+-]+", "_", name).strip("_")[:200] or "run"


def trainer_settings(run: TrackerRun, names: Sequence[str]) -> dict[str, Any]:
    """GRPOConfig fields that name the run in transformers' integrations: ``run_name`` (W&B's and
    trackio's run name) and ``project`` (trackio's project)."""
    return {"run_name": run.name, "project": run.project} if names else {}


@contextlib.contextmanager
def environment(run: TrackerRun, grid_dir: Path, names: Sequence[str]) -> Iterator[None]:
    """While the trainer is built: ``TENSORBOARD_LOGGING_DIR`` (read by ``TensorBoardCallback`` when
    it is made) points at ``grid_dir/tensorboard/<name>``; put back after."""
    if "tensorboard" not in names:
        yield
        return
    before = os.environ.get("TENSORBOARD_LOGGING_DIR")
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(Path(grid_dir) / TENSORBOARD_DIR / folder_name(run.name))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
        else:
            os.environ["TENSORBOARD_LOGGING_DIR"] = before


def start(trainer: Any, run: TrackerRun, run_dir: Path, names: Sequence[str], main: bool) -> None:
    """Open the tracker runs (rank 0 only: ``main``) before ``trainer.train()``.

    W&B: ``wandb.init`` with the run's id, project, group, name, tags and config, ``resume="allow"``,
    in ``$WANDB_DIR`` or ``run_dir``; ``WandbCallback`` then logs into it (it opens a run only when
    none is open). trackio and TensorBoard: their callbacks are swapped for ones that also record
    the group and config (:func:`_swap_callbacks`).
    """
    if not names:
        return
    _swap_callbacks(trainer, run)
    if main and "wandb" in names:
        import wandb

        wandb.init(
            id=run.id,
            project=run.project,
            group=run.group,
            name=run.name,
            tags=list(run.tags),
            config={"grpo_harness": run.config},
            resume="allow",
            dir=os.environ.get("WANDB_DIR") or str(run_dir),
        )


def finish(names: Sequence[str], main: bool) -> None:
    """Close this process's W&B run (a debug executor trains several runs in one process)."""
    if main and "wandb" in names:
        import wandb

        if wandb.run is not None:
            wandb.finish()


def _swap_callbacks(trainer: Any, run: TrackerRun) -> None:
    """Replace transformers' ``TrackioCallback`` and ``TensorBoardCallback`` in ``trainer`` with
    subclasses that record the group and config too."""
    from transformers.integrations import TensorBoardCallback, TrackioCallback

    class GridTrackio(TrackioCallback):
        def setup(self, args, state, model, **kwargs):
            if state.is_world_process_zero:
                self._trackio.init(
                    project=run.project,
                    name=run.name,
                    group=run.group,
                    config={"grpo_harness": run.config, "tags": list(run.tags)},
                    resume="allow",
                    auto_log_cpu=False,
                    auto_log_gpu=False,
                )
                self._trackio.config.update(args.to_dict(), allow_val_change=True)
            self._initialized = True

    class GridTensorBoard(TensorBoardCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            super().on_train_begin(args, state, control, **kwargs)
            if self.tb_writer is not None and state.is_world_process_zero:
                self.tb_writer.add_text("grpo_harness", _markdown_json(run.config))

    swaps = {TrackioCallback: GridTrackio, TensorBoardCallback: GridTensorBoard}
    callbacks = trainer.callback_handler.callbacks
    for i, cb in enumerate(callbacks):
        new = swaps.get(type(cb))
        if new is not None:
            fresh = new.__new__(new)
            fresh.__dict__.update(cb.__dict__)  # keep what __init__ set (the module, the writer class)
            callbacks[i] = fresh


def _markdown_json(data: Mapping[str, Any]) -> str:
    """JSON in a markdown code block (TensorBoard's text plugin renders markdown)."""
    return "```\n" + json.dumps(data, indent=2, default=str) + "\n```"
