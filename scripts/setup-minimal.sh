#!/usr/bin/env bash
# Create .venv-min: grpo-harness with its test tools only (no peft, trackers, deepspeed or docs
# extras), at the lock's versions, where the tests that run only without an optional package run.
# Usage: bash scripts/setup-minimal.sh && .venv-min/bin/python -m pytest -q -m "not slow"
set -euo pipefail
SETUP_MINIMAL=1 exec bash "$(dirname "$0")/setup.sh"
