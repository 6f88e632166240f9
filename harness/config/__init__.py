"""Planning a grid: the grid language (YAML, includes, profiles, overrides, sub-grids, the report
and findings sections), expansion into runs with stable ids, and validation of every cell against
TRL, the models, the losses and the rewards before anything runs (the LoRA section, DeepSpeed and
FSDP settings included). The typed settings it plans with are :mod:`harness.settings`. No torch,
transformers or trl at module level."""
