"""Per-step overhead of the harness over bare TRL, measured side by side in one process.

Both arms train the same run (same model, task, GRPOConfig and seed) for the same number of optimizer
steps with the greedy eval off: the bare arm is TRL's ``GRPOTrainer``; the harness arm is
``harness.training.train`` (the w_seq-recording trainer, the metrics callback, parquet writes, samples).
Arms alternate over repeats so that drift of the machine hits both. Prints seconds per step of
each arm (median over repeats) and the overhead ratio with its spread over repeats.

    python benchmarks/overhead.py [--grid ablations/smoke.yaml] [--steps 40] [--repeats 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", default="ablations/smoke.yaml")
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps per arm and repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("-o", "--override", action="append", default=[])
    args = ap.parse_args()

    import torch
    from trl import GRPOTrainer

    from harness.grid import expand
    from harness.spec import load_grid
    from harness.training import build_trainer, prepare_model, seed_everything, train
    from harness.trl_boundary import build_grpo_config, grpo_config_kwargs

    overrides = [*args.override, f"trainer.max_steps={args.steps}", "harness.eval_steps=0"]
    plan = expand(load_grid(args.grid, overrides))
    spec = plan.runs[0]
    torch.set_num_threads(args.threads)
    model_path = prepare_model(spec, Path("results") / plan.grid.name / "runs" / spec.run_id)
    print(
        f"run {spec.run_id} ({spec.varying}), {args.steps} steps x {args.repeats} repeats, {args.threads} thread(s)"
    )

    def bare(tmp: Path) -> float:
        seed_everything(spec.seed)
        config = build_grpo_config(grpo_config_kwargs(spec, "cpu", str(tmp / "bare")), "cpu")
        trainer, _, _ = build_trainer(spec, model_path, config, trainer_class=GRPOTrainer)
        t0 = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - t0) / args.steps

    def harness(tmp: Path) -> float:
        summary = train(spec, tmp / "harness", device="cpu", threads=args.threads)
        return summary["seconds"] / summary["steps"]

    bare_s, harness_s, ratios = [], [], []
    for r in range(args.repeats):
        tmp = Path(tempfile.mkdtemp(prefix="overhead-"))
        try:
            arms = [("bare", bare), ("harness", harness)]
            if r % 2:
                arms.reverse()
            got = {name: fn(tmp) for name, fn in arms}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        bare_s.append(got["bare"])
        harness_s.append(got["harness"])
        ratios.append(got["harness"] / got["bare"])
        print(
            f"repeat {r + 1}: bare {got['bare'] * 1e3:.1f} ms/step, harness {got['harness'] * 1e3:.1f} ms/step, "
            f"ratio {ratios[-1]:.3f}"
        )
    med = statistics.median(ratios)
    print(f"bare TRL:  {statistics.median(bare_s) * 1e3:.1f} ms/step (median of {args.repeats})")
    print(f"harness:   {statistics.median(harness_s) * 1e3:.1f} ms/step (median of {args.repeats})")
    print(
        f"overhead:  {100 * (med - 1):+.1f}% per step (median ratio {med:.3f}; "
        f"range {min(ratios):.3f}-{max(ratios):.3f} over repeats)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
