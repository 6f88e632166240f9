"""The grid's and the run's typed settings, the bottom layer every package may import.

:mod:`harness.settings.schema` holds each section of a grid file as a frozen typed dataclass (with
the language of field types, :func:`~harness.settings.schema.canonical_json` and the run id);
:mod:`harness.settings.runs` a grid and its runs built from them. Neither imports anything else of
the project, nor torch, transformers or trl.
"""
