"""grpo-harness: run GRPO loss ablations on TRL and report them."""

__version__ = "0.1.0"
