"""Analysis of a results folder: loading, curves, statistics and tables.

``analysis.load(results_dir)`` returns every run's per-step metrics as one frame with the run
configs joined; the curves (:mod:`analysis.aggregate`, :mod:`analysis.curves`), the tables
(:mod:`analysis.timing`, :mod:`analysis.scores`, :mod:`analysis.learning_check`,
:mod:`analysis.time_to_target`, rendered by :mod:`analysis.tables`) and :mod:`analysis.report`
build on it.

Importing the package loads nothing: ``analysis.load`` is :func:`analysis.load.load`, imported on
first use, so the light modules of the package that a grid's planning reads
(:mod:`analysis.settings`, :mod:`analysis.settings.report`) are imported without pandas or pyarrow.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["load"]


class _Package(types.ModuleType):
    """The ``analysis`` package, whose attribute ``load`` is the function :func:`analysis.load.load`
    (imported on first use), never the submodule of that name."""

    @property
    def load(self) -> Any:
        from analysis.load import load

        return load

    @load.setter
    def load(self, module: Any) -> None:
        """The import system records the submodule ``analysis.load`` under its name here; the name
        stays the function (``sys.modules["analysis.load"]`` is the module)."""


sys.modules[__name__].__class__ = _Package
