"""What a grid file says of its analysis: the ``findings:`` section's vocabulary, its shape check,
the selector language its arms share with a progression's rows, and what ``grid.json`` records of it
(:mod:`analysis.settings.findings`, :mod:`analysis.settings.finding_dose`).

Light on purpose: it imports nothing of the project but :mod:`harness.settings`, and no pandas,
numpy, matplotlib, torch or trl, so planning a grid (:mod:`harness.config`) takes it without
loading the analysis. The grid's key language it checks selectors with is planning's, passed in
(:class:`analysis.settings.keys.SettingKeys`).
"""
