"""The built-in rewards: ``correctness`` and ``format`` (the task's own scoring,
:mod:`harness.models.tasks`) and ``soft_overlong`` (TRL's ``get_soft_overlong_punishment``,
DAPO's soft overlong punishment). Importing this module registers them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.models.tasks import correctness_scores, format_scores
from harness.rewards import register_reward


@register_reward("correctness", paper="the dataset's own scorer (reasoning-gym score_answer)")
def correctness(completions, entry, *, task, completion_ids=None, log_metric=None, **_: Any) -> list[float]:
    """The dataset's score of each completion's answer, in [0, 1] (1 = correct)."""
    return correctness_scores(task, completions, entry, completion_ids, log_metric)


@register_reward("format", paper="a well-formed answer, whatever its value")
def format_(completions, *, task, **_: Any) -> list[float]:
    """1.0 for a completion whose answer is written as the template asks, else 0.0."""
    return format_scores(task, completions)


def _soft_overlong_check(settings: Mapping[str, Any], max_completion_length: int) -> list[str]:
    cache = settings["soft_punish_cache"]
    if 1 <= cache <= max_completion_length:
        return []
    return [
        f"task.rewards: soft_overlong's soft_punish_cache = {cache!r} must be in [1, max_completion_length = "
        f"{max_completion_length}]: it is the number of tokens before the budget over which the punishment "
        f"falls from 0 to -1 (DAPO's L_cache); use e.g. {max(1, max_completion_length // 4)}."
    ]


@register_reward(
    "soft_overlong",
    paper="DAPO, arXiv:2503.14476, §3.4 and Eq. 13 (TRL's trl.rewards.get_soft_overlong_punishment)",
    check=_soft_overlong_check,
)
def soft_overlong(
    completions, completion_ids, *, max_completion_length, soft_punish_cache: int = 16, **_: Any
) -> list[float]:
    """0 for a completion of at most ``max_completion_length - soft_punish_cache`` tokens, falling
    linearly to -1 at ``max_completion_length``, -1 beyond (TRL's function, unchanged)."""
    from trl.rewards import get_soft_overlong_punishment

    return get_soft_overlong_punishment(max_completion_length, soft_punish_cache)(completion_ids)
