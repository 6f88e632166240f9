"""The grid's key language, as the analysis's settings check a selector with it.

Planning owns the language (:mod:`harness.config.keys`: which keys a grid has, their types, how a
value is coerced) and passes it in, so that these settings need nothing of planning: the module
:mod:`harness.config.keys` itself is a :class:`SettingKeys`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class SettingKeys(Protocol):
    """The grid's key language, as planning owns it (:mod:`harness.config.keys` is passed as is):
    what a selector's keys and values, and a dose's key and values, are checked with."""

    def normalize_key(self, key: str) -> str:
        """A bare ``GRPOConfig`` field name as ``trainer.<name>``; other keys unchanged."""
        ...

    def run_setting_key(self, key: str, where: str) -> str | None:
        """The problem with dotted ``key`` as a run setting runs are compared by, or None."""
        ...

    def check_setting(self, key: str, value: Any, where: str) -> str | None:
        """The problem with setting ``key`` to ``value`` (unknown key, wrong type), or None."""
        ...

    def coerce_number(self, key: str, value: Any) -> Any:
        """``value`` as the grid holds it for ``key`` (an int as a float where the field is a float)."""
        ...

    def suggest(self, word: str, options: Sequence[str]) -> str:
        """`` Did you mean 'x'?`` for the options close to ``word``, or ""."""
        ...
