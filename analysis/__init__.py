"""Analysis of a results folder: loading, curves, statistics and tables.

``analysis.load(results_dir)`` returns every run's per-step metrics as one frame with the run
configs joined; :mod:`analysis.curves`, :mod:`analysis.tables` and :mod:`analysis.report` build
on it.
"""

from analysis.load import load

__all__ = ["load"]
