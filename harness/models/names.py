"""Model names: what a grid's ``model:`` may say, and what ``from_pretrained`` gets for it.

``tiny``, ``tiny-chat`` and ``tiny-steps`` are built and cached for the run's task
(:mod:`harness.models.tiny`, :mod:`harness.models.tiny_chat`, :mod:`harness.models.tiny_steps`); a
local ``save_pretrained`` folder is taken as is; anything else is a hub id, never contacted here.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from harness.models.build_progress import BuildWatch
from harness.models.tiny import tiny_model_path
from harness.settings.schema import (
    TINY,
    TINY_CHAT,
    TINY_STEPS,
    TaskSpec,
    TinyChatModelSpec,
    TinyModelSpec,
    TinyStepsModelSpec,
)

_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _looks_like_path(model: str) -> bool:
    return (
        model.startswith(("/", "./", "../", "~"))
        or model in (".", "..")
        or "\\" in model
        or model.count("/") > 1
        or not _HUB_ID_RE.match(model)
    )


def resolve_model(
    model: str,
    task: TaskSpec | None = None,
    cache_dir: str | Path | None = None,
    tiny_spec: TinyModelSpec | None = None,
    watch: BuildWatch | None = None,
) -> str:
    """Turn a model name from a config into what ``from_pretrained`` takes. Never contacts a hub.

    Args:
        model: ``"tiny"`` or ``"tiny-chat"`` (built and cached for ``task`` under ``cache_dir``: a folder
            that ``from_pretrained`` loads), a local folder (returned as is, ``~`` expanded) or anything
            else, taken as a hub id and returned unchanged.
        task: required for the embedded models.
        cache_dir: required for the embedded models.
        tiny_spec: the embedded model's spec; defaults to ``TinyModelSpec()`` for ``"tiny"`` and
            ``TinyChatModelSpec()`` for ``"tiny-chat"``.
        watch: who needs an embedded model, told how its build goes while it is built or waited for
            (:class:`harness.models.build_progress.BuildWatch`); it may raise to stop.

    Raises:
        ValueError: an embedded model without task or cache_dir, ``"tiny-chat"`` with a spec that is
            not a :class:`TinyChatModelSpec`, an invalid task, or a problem reported by :func:`check_model`.
    """
    if model in (TINY, TINY_CHAT, TINY_STEPS):
        if task is None or cache_dir is None:
            raise ValueError(f"model {model!r} needs the task and a cache_dir to build it in")
        if model == TINY:
            return str(tiny_model_path(tiny_spec or TinyModelSpec(), task, cache_dir, watch))
        if model == TINY_STEPS:
            if tiny_spec is not None and not isinstance(tiny_spec, TinyStepsModelSpec):
                raise ValueError(
                    f"model 'tiny-steps' takes a TinyStepsModelSpec, got {type(tiny_spec).__name__}"
                )
            from harness.models.tiny_steps import tiny_steps_model_path

            return str(tiny_steps_model_path(tiny_spec or TinyStepsModelSpec(), task, cache_dir, watch))
        if tiny_spec is not None and not isinstance(tiny_spec, TinyChatModelSpec):
            raise ValueError(f"model 'tiny-chat' takes a TinyChatModelSpec, got {type(tiny_spec).__name__}")
        from harness.models.tiny_chat import tiny_chat_model_path

        return str(tiny_chat_model_path(tiny_spec or TinyChatModelSpec(), task, cache_dir, watch))
    problems = check_model(model)
    if problems:
        raise ValueError("; ".join(problems))
    local = Path(model).expanduser()
    return str(local) if local.is_dir() else model


def embedded_build(model: str, task: TaskSpec, tiny_spec: TinyModelSpec | None = None):
    """The cache key of an embedded model (``tiny``, ``tiny-chat``, ``tiny-steps``) for ``task``, and
    the function that builds it: ``(key, build)`` with ``build(out_dir) -> info`` (the model's own
    build, which never uses a shipped copy: :mod:`harness.models.prebuilt`).

    Raises:
        ValueError: ``model`` is no embedded model.
    """
    spec_class = {TINY: TinyModelSpec, TINY_CHAT: TinyChatModelSpec, TINY_STEPS: TinyStepsModelSpec}
    if model not in spec_class:
        raise ValueError(f"{model!r} is no embedded model ({', '.join(spec_class)})")
    spec = tiny_spec or spec_class[model]()
    if model == TINY:
        from harness.models.tiny import build_tiny_model, tiny_model_key

        return tiny_model_key(spec, task), lambda out: build_tiny_model(spec, task, out)
    if model == TINY_STEPS:
        from harness.models.tiny_steps import build_tiny_steps_model, tiny_steps_model_key

        return tiny_steps_model_key(spec, task), lambda out: build_tiny_steps_model(spec, task, out)
    from harness.models.tiny_chat import build_tiny_chat_model, tiny_chat_model_key

    return tiny_chat_model_key(spec, task), lambda out: build_tiny_chat_model(spec, task, out)


def has_chat_template(folder: Path) -> bool:
    """Whether a ``save_pretrained`` model folder's tokenizer has a chat template: a
    ``chat_template`` in ``tokenizer_config.json`` (older transformers), or a
    ``chat_template.jinja`` / ``chat_template.json`` file or ``additional_chat_templates/`` folder
    beside it (transformers >= 4.43 and 5.x), where ``AutoTokenizer`` looks for one."""
    import json

    if any((folder / name).exists() for name in ("chat_template.jinja", "chat_template.json")):
        return True
    if (folder / "additional_chat_templates").is_dir():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


def check_model(model: str) -> list[str]:
    """Problems with a model name as messages; empty when it is ``"tiny"``, ``"tiny-chat"``, a model
    folder or a hub id.

    A value that looks like a path (starts with ``/``, ``.`` or ``~``, or has more than one ``/``) must be
    a folder holding a ``config.json``. Hub ids are not checked for existence (that would need the hub).
    """
    if not isinstance(model, str) or not model.strip():
        return [f"model must be a non-empty string, got {model!r}"]
    if model in (TINY, TINY_CHAT, TINY_STEPS):
        return []
    local = Path(model).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            return [f"model folder {model!r} has no config.json (not a save_pretrained folder)"]
        return []
    if local.exists():
        return [f"model path {model!r} is a file, not a model folder"]
    if _looks_like_path(model):
        return [
            f"model path {model!r} does not exist (and is not a hub id like 'org/name', {TINY!r} or {TINY_CHAT!r})"
        ]
    close = difflib.get_close_matches(model, (TINY, TINY_CHAT, TINY_STEPS), n=1, cutoff=0.8)
    if close and "/" not in model:
        return [
            f"model {model!r} is no embedded model and no folder; did you mean {close[0]!r}? (A hub id would "
            "be downloaded; write it as 'org/name'.)"
        ]
    return []
