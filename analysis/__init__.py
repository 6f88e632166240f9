"""Analysis of a results folder: loading, curves, statistics and tables.

``analysis.load(results_dir)`` returns every run's per-step metrics as one frame with the run
configs joined; the curves (:mod:`analysis.aggregate`, :mod:`analysis.curves`), the tables
(:mod:`analysis.timing`, :mod:`analysis.scores`, :mod:`analysis.learning_check`,
:mod:`analysis.time_to_target`, rendered by :mod:`analysis.tables`) and :mod:`analysis.report`
build on it.
"""

from analysis.load import load

__all__ = ["load"]
