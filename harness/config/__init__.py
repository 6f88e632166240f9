"""Configuring a grid: the settings' schema, the grid language (YAML, includes, profiles, overrides,
sub-grids, the report and findings sections), expansion into runs with stable ids, validation of
every cell before anything runs (the LoRA section, DeepSpeed and FSDP settings included), and the
memo of slow library answers. No torch, transformers or trl at module level."""
