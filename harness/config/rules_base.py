"""What a validation rule sees and says: a run's :class:`RunContext`, its :class:`Finding` s, and
a plan's :class:`Validation` with its listing (one line per distinct message).

A rule is a function ``(RunContext) -> list[Finding]`` (:data:`Rule`); the rules are
:mod:`harness.config.rules_trainer` and :mod:`harness.config.rules_run`, their table and the plan's
checks :mod:`harness.config.validate`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.settings.runs import RunSpec
from harness.settings.schema import (
    ExecutorSettings,
)
from harness.trl_boundary import (
    grpo_config_defaults,
)


@dataclass(frozen=True)
class Finding:
    """One problem (``level="error"``) or caveat (``level="warning"``) of one run."""

    level: str
    message: str
    run_id: str = ""
    where: str = ""  # the run's varying values, "loss_type=nope, seed=0"


@dataclass
class Validation:
    """All findings of a plan. ``ok`` is False when any error was found."""

    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def format(self, source: str = "") -> str:
        """Human-readable listing, errors first: one line per distinct message (a message several
        runs share lists their ids; one run's gives its varying values), then the warnings, also
        one line per distinct message."""
        lines = []
        head = f"{source}: " if source else ""
        if self.errors:
            errors = error_lines(self.errors)  # one per distinct problem, with the runs it covers
            n = len(errors)
            lines.append(f"{head}{n} error{'s' if n != 1 else ''}; nothing was run or written:")
            lines += [f"  - {line}" for line in errors]
        seen = set()
        for f in self.warnings:
            if f.message in seen:
                continue
            seen.add(f.message)
            ids = [g.run_id for g in self.warnings if g.message == f.message and g.run_id]
            n = max(len(ids), 1)
            which = f" [{', '.join(ids[:6])}{', ...' if len(ids) > 6 else ''}]" if ids else ""
            runs = f" ({n} run{'s' if n != 1 else ''}{which})" if ids else ""
            lines.append(f"warning{runs}: {f.message}")
        return "\n".join(lines)


def error_lines(errors: Sequence[Finding]) -> list[str]:
    """One line per distinct error message: the runs it covers (their ids, or one run's varying values)."""
    by_message: dict[str, list[Finding]] = {}
    for f in errors:
        by_message.setdefault(f.message, []).append(f)
    lines = []
    for message, found in by_message.items():
        ids = [f.run_id for f in found if f.run_id]
        if len(ids) > 1:
            shown = ", ".join(ids[:6]) + (", ..." if len(ids) > 6 else "")
            lines.append(f"{len(ids)} runs [{shown}]: {message}")
        elif ids:
            lines.append(f"run {ids[0]} ({found[0].where}): {message}")
        else:
            lines.append(message)
    return lines


@dataclass(frozen=True)
class RunContext:
    """What a rule sees: the run, its trainer settings as written, TRL's resolved config (or None)."""

    run: RunSpec
    trainer: Mapping[str, Any]  # settings as written in the grid (explicit keys only)
    config: Mapping[str, Any] | None  # GRPOConfig's resolved fields (JSON values), None if TRL rejected them
    varying_keys: tuple[str, ...]
    clip_siblings: int = 1  # runs of the plan identical to this one but for the clip values
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)

    @property
    def loss_type(self) -> Any:
        """The ``loss_type`` as the grid writes it: a plugin's name (TRL's resolved config holds its
        reduction instead)."""
        return self.trainer.get("loss_type", self.value("loss_type"))

    def value(self, name: str) -> Any:
        """A trainer field: TRL's resolved value when available, else as written, else TRL's default."""
        if self.config is not None:
            return self.config.get(name)
        if name in self.trainer:
            return self.trainer[name]
        return grpo_config_defaults().get(name)


Rule = Callable[[RunContext], list[Finding]]


def err(msg: str) -> list[Finding]:
    """``msg`` as a rule's one error."""
    return [Finding("error", msg)]


def warn(msg: str) -> list[Finding]:
    """``msg`` as a rule's one warning."""
    return [Finding("warning", msg)]
