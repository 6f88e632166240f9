"""An on-disk memo of slow library verdicts that validation needs, so `plan` and `submit` stay fast.

Validating a grid asks two libraries questions whose answers depend only on the question and the
libraries' versions: TRL's ``GRPOConfig`` (its field types, and whether it accepts a set of trainer
settings, with the values it resolves) and reasoning-gym (whether a dataset accepts its arguments).
Asking costs the imports: torch + TRL ~2.7 s, TRL's first ``GRPOConfig`` ~2.3 s (it imports
transformers' model code), reasoning-gym ~1 s. The embedded models' sequence lengths for a task
(:func:`harness.config.rules_run.embedded_lengths`: the SFT data and tokenizer, a second or a few) are kept
the same way. Each answer is stored as one JSON file named by the
SHA-256 of (namespace, schema, key), where the key holds the installed versions of the libraries that
gave it, so upgrading any of them asks again.

One file per answer, written to a temporary file and renamed into place: concurrent writers on a
shared (NFS) home directory cannot leave a torn entry, and there is no database lock to hold (SQLite,
which disk-cache libraries build on, documents NFS locking as unreliable). A corrupt or unreadable
entry is ignored and recomputed; a cache folder that cannot be written only costs the speed.

Location: ``$GRPO_HARNESS_VERDICTS`` if set (``off`` disables the memo), else
``<user cache dir>/grpo-harness/verdicts`` (``~/.cache/...`` on Linux, via platformdirs).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from harness.layout import atomic_path

ENV = "GRPO_HARNESS_VERDICTS"
#: Bump when what is stored for an existing key changes meaning, so old entries are not reused.
SCHEMA = 1

#: The distributions whose versions key every answer about TRL's ``GRPOConfig``.
TRL_STACK = ("trl", "transformers", "accelerate", "torch")

T = TypeVar("T")


def cache_dir() -> Path | None:
    """The memo's folder, or None when ``$GRPO_HARNESS_VERDICTS`` is ``off``."""
    env = os.environ.get(ENV)
    if env:
        return None if env.strip().lower() == "off" else Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("grpo-harness")) / "verdicts"


@functools.cache
def versions(*dists: str) -> dict[str, str]:
    """``{distribution: installed version}`` (``"absent"`` when not installed), plus Python's version."""
    out = {"python": platform.python_version()}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = "absent"
    return out


def _typed(obj: Any) -> Any:
    # a value JSON cannot hold (a YAML date) keeps its type, so it never collides with a string
    return {"__type__": type(obj).__qualname__, "__repr__": repr(obj)}


def _path(namespace: str, key: Mapping[str, Any]) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    text = json.dumps({"ns": namespace, "schema": SCHEMA, "key": key}, sort_keys=True, default=_typed)
    return root / namespace / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def memo(
    namespace: str,
    key: Mapping[str, Any],
    compute: Callable[[], T],
    valid: Callable[[Any], bool] = lambda value: True,
) -> T:
    """``compute()``'s JSON-serialisable result, read from the memo when it holds ``key``.

    Args:
        namespace: what kind of answer (a sub-folder), e.g. ``"grpo-config"``.
        key: everything the answer depends on, library versions included (:func:`versions`); JSON.
        compute: produces the answer on a miss; its exceptions propagate and nothing is stored.
        valid: whether a stored value has the shape ``compute`` returns; an entry that fails it
            (edited, or written by another schema) is recomputed and replaced.
    """
    path = _path(namespace, key)
    if path is not None:
        try:
            value = json.loads(path.read_text())["value"]
            if valid(value):
                return value
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # missing, torn by a crash, or unreadable: ask the library
    value = compute()
    if path is not None:
        _store(path, value)
    return value


def _store(path: Path, value: Any) -> None:
    text = json.dumps({"value": value})  # TypeError/ValueError for a value with no JSON form
    # read-only, full, or the entry's name taken by a folder: skip storing
    with contextlib.suppress(OSError), atomic_path(path, prefix=".tmp-") as tmp, open(tmp, "w") as f:
        f.write(text)


class NotJSON(ValueError):
    """A value with no faithful JSON form (an arbitrary object)."""


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: enums become their values, tuples lists; raises :class:`NotJSON` otherwise."""
    import enum

    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: jsonable(v) for k, v in value.items()}
    raise NotJSON(f"{type(value).__name__} has no JSON form")


def jsonable_items(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """``{name: jsonable(value)}`` for the pairs whose value has a JSON form; the others are left out."""
    out = {}
    for name, value in items:
        with contextlib.suppress(NotJSON):
            out[name] = jsonable(value)
    return out
