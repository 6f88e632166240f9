"""Analysis of a results folder: loading, curves, statistics and tables.

``analysis.load(results_dir)`` returns every run's per-step metrics as one frame with the run
configs joined; the curves (:mod:`analysis.aggregate`, :mod:`analysis.curves`), the tables
(:mod:`analysis.timing`, :mod:`analysis.scores`, :mod:`analysis.learning_check`,
:mod:`analysis.time_to_target`, rendered by :mod:`analysis.tables`) and :mod:`analysis.report`
build on it.

Importing the package loads nothing heavy: ``analysis.load`` (pandas, pyarrow) is imported at its
first use, so that planning a grid can take the light :mod:`analysis.settings` alone.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["load"]


class _Package(types.ModuleType):
    """The package's module type: ``analysis.load`` stays the loading function, as it was when the
    package imported it eagerly, even once the submodule of that name is imported (which binds the
    submodule to the package's attribute)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "load" and isinstance(value, types.ModuleType):
            value = value.load
        super().__setattr__(name, value)


def __getattr__(name: str) -> Any:
    if name == "load":
        import analysis.load  # noqa: F401  (binds the function, through _Package.__setattr__)

        return globals()["load"]
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")


sys.modules[__name__].__class__ = _Package
