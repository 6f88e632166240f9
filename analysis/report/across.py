"""One report from several results folders: ``grpo-harness report results/A results/B --across
model --out DIR``.

Runs are matched by their settings (each started run's ``config.json``, flattened to dotted keys;
the seed and the grid's name aside), never by folder names:

* a key whose values in two of the grids have none in common *tells the grids apart*. It must be
  named: ``--across KEY`` (what the comparison is about: a panel per value) or
  ``--allow-different KEY`` (a difference accepted and listed in the report). Any other is refused
  (:class:`ReportError` naming the key, its values in each folder and both fixes) before a metric is
  read or a file written;
* a key whose values only partly overlap (grpo, dapo and vespo in one grid, grpo in the other) is
  matched on: a run is compared when every other folder has a run with the same settings (named
  and allowed keys and seeds aside); each other run is listed as left out, with the value that has
  no counterpart;
* ``--across folder`` compares the folders as such (the same settings on two machines, say).

Naming a key covers the keys under it (``task`` covers ``task.name`` and ``task.kwargs.*``), and
``model`` also covers the embedded models' own sections (``tiny.*``, ``tiny_chat.*``,
``tiny_steps.*``). Run ids become ``<folder label>/<run id>`` (they stay unique when two folders hold
the same settings), and the frame gets a :data:`FOLDER` column. The report is written to ``--out``,
a new folder outside every compared one, with :data:`SOURCES_FILE` recording what was compared.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from analysis.load import NONE_LABEL as NONE
from analysis.load import collect_config, list_runs
from analysis.report.inputs import (
    read_run_set,
)
from analysis.report.runs import value_text
from analysis.settings.report import ReportSettings
from analysis.settings.report_values import ReportError
from harness import layout

#: The column naming each run's results folder (its label), and the ``--across`` name of the folders.
FOLDER = "folder"
#: What a report written with ``--out`` records beside ``index.md``: the folders, keys and runs.
SOURCES_FILE = "sources.json"
#: Keys that are no setting of a run: the grid's name.
_BOOKKEEPING = ("grid",)
#: The embedded models' own sections, covered by naming ``model``.
_MODEL_SECTIONS = ("tiny.", "tiny_chat.", "tiny_steps.")


@dataclass(frozen=True)
class Grid:
    """One results folder of a comparison.

    Attributes:
        path: the folder as given.
        label: the shortest end of its path no other compared folder has (``smoke``, or
            ``tiny/smoke`` beside ``chat/smoke``); run ids are prefixed with it.
        name: the grid's name (``grid.json``), else the folder's name.
        ids: the run set (``grid.json``'s runs, every run folder with ``--all``), in order.
        run_set: a phrase naming the run set.
        settings: ``{run id: {dotted key: value}}`` of each run of ``ids`` whose ``config.json``
            could be read (the runs that started).
        grid_runs: ``grid.json``'s ``{run id: {key: value}}`` of the planned runs (empty without).
    """

    path: Path
    label: str
    name: str
    ids: tuple[str, ...]
    run_set: str
    settings: Mapping[str, Mapping[str, Any]]
    grid_runs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Difference:
    """A setting whose values are not the same in every folder.

    Attributes:
        key: the dotted key.
        values: per folder (in the comparison's order) its values as text, sorted; ``(none)``: a
            run that does not set the key (the default applies).
    """

    key: str
    values: tuple[tuple[str, ...], ...]

    def disjoint(self) -> bool:
        """Whether some two folders share no value of the key (it tells them apart)."""
        sets = [set(v) for v in self.values]
        return any(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])

    def describe(self, grids: Sequence[Grid]) -> str:
        """``key = values in label; values in label``."""
        return f"{self.key} = " + "; ".join(
            f"{', '.join(v)} in {g.label}" for g, v in zip(grids, self.values, strict=True)
        )


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found: the folders, what tells them apart, and the runs compared.

    Attributes:
        grids: the folders, in the order given.
        across: the names given to ``--across``, resolved (dotted keys, a section such as ``task``,
            or :data:`FOLDER`).
        facets: the columns the panels are drawn by (the named keys, or the keys under a named
            section that tell the grids apart).
        named: the differences the named keys cover.
        allowed: the differences ``--allow-different`` accepted.
        partial: keys whose values only partly overlap; runs are matched on them.
        seeds: the seeds when they differ between the folders, else None.
        kept: ``{folder label: run ids compared}``.
        unmatched: ``{prefixed run id: why it has no counterpart}``.
        notes: remarks on the arguments (an allowed key that does not differ).
    """

    grids: tuple[Grid, ...]
    across: tuple[str, ...]
    facets: tuple[str, ...]
    named: tuple[Difference, ...]
    allowed: tuple[Difference, ...]
    partial: tuple[Difference, ...]
    seeds: Difference | None
    kept: Mapping[str, tuple[str, ...]]
    unmatched: Mapping[str, str]
    notes: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        """The report's title: the folders and what they are compared across."""
        if not self.across:
            return " + ".join(g.label for g in self.grids) + " (pooled)"
        return " vs ".join(g.label for g in self.grids) + f" (across {', '.join(self.across)})"


def compare(
    folders: Sequence[str | Path],
    *,
    across: Sequence[str] = (),
    allow_different: Sequence[str] = (),
    all_runs: bool = False,
) -> Comparison:
    """Read the settings of each folder's runs, check what tells the folders apart, and match runs.

    Reads ``grid.json`` and each run's ``config.json``, no metrics; writes nothing.

    Args:
        folders: two or more results folders, ``results/<grid>``.
        across: the keys the comparison is about (dotted, an alias's last component such as
            ``loss_type``, a section such as ``task``, or ``folder``).
        allow_different: keys that may differ between the folders without being compared.
        all_runs: every run folder of each, not only its grid as last planned.

    Returns:
        A :class:`Comparison`.

    Raises:
        FileNotFoundError: a folder has no ``runs/`` folder.
        ReportError: fewer than two folders, the same folder twice, a damaged ``grid.json``, a
            folder without a started run, a name that is no setting of the runs, a named key that
            does not tell the folders apart, a key that does without being named (the message names
            it, its values per folder and the fixes), or no run with a counterpart in every folder.
    """
    grids = read_grids(folders, all_runs)
    diffs = differences(grids)
    keys = {k for g in grids for s in g.settings.values() for k in s}
    named = tuple(dict.fromkeys(n for a in across for n in _resolve(a, keys, diffs, "--across")))
    allowed = tuple(
        dict.fromkeys(n for a in allow_different for n in _resolve(a, keys, diffs, "--allow-different"))
    )
    facets = _facets(named, grids, diffs)
    seeds = next((d for d in diffs if is_seed(d.key)), None)
    diffs = [d for d in diffs if not is_seed(d.key)]
    refused = [d for d in diffs if d.disjoint() and not _covered(d.key, (*named, *allowed))]
    if refused:
        raise ReportError(_refusal(refused, grids, named, allowed))
    ignored = (*named, *allowed)
    kept, unmatched = _match(grids, ignored)
    notes = tuple(
        f"--allow-different {a}: the same in every folder, nothing to allow"
        for a in allowed
        if not any(_covered(d.key, (a,)) for d in diffs)
    )
    return Comparison(
        grids=grids,
        across=named,
        facets=facets,
        named=tuple(d for d in diffs if _covered(d.key, named)),
        allowed=tuple(d for d in diffs if _covered(d.key, allowed) and not _covered(d.key, named)),
        partial=tuple(d for d in diffs if not d.disjoint() and not _covered(d.key, ignored)),
        seeds=seeds,
        kept=kept,
        unmatched=unmatched,
        notes=notes,
    )


def differences(grids: Sequence[Grid]) -> list[Difference]:
    """The settings whose values are not the same set in every folder (the grid's name aside), in
    the order the runs' settings first name them."""
    keys = dict.fromkeys(k for g in grids for s in g.settings.values() for k in s if k not in _BOOKKEEPING)
    out = []
    for key in keys:
        values = tuple(tuple(sorted({value_text(s.get(key)) for s in g.settings.values()})) for g in grids)
        if len(set(values)) > 1:
            out.append(Difference(key, values))
    return out


def read_grids(folders: Sequence[str | Path], all_runs: bool) -> tuple[Grid, ...]:
    """Each folder's run set and its started runs' settings (:class:`Grid`), labelled.

    Raises:
        ReportError: fewer than two folders, one given twice, or one without a started run.
    """
    paths = [Path(f) for f in folders]
    if len(paths) < 2:
        raise ReportError(
            "--across and --allow-different compare several results folders; give two or more "
            "(one folder's report needs neither)"
        )
    resolved = [p.resolve() for p in paths]
    for i, p in enumerate(resolved):
        if p in resolved[:i]:
            raise ReportError(f"{paths[i]} is given twice; give each results folder once")
    grids = []
    for path, label in zip(paths, _labels(resolved), strict=True):
        info, ids, run_set = read_run_set(path, all_runs=all_runs)
        present = set(list_runs(path))
        started = [r for r in ids if r in present]
        damaged: dict[str, str] = {}
        rows = collect_config(path, started, [], damaged).rows
        settings = {r: row for r, row in zip(started, rows, strict=True) if r not in damaged}
        if not settings:
            raise ReportError(
                f"{path}: none of its {len(ids)} run(s) has started (no readable {layout.CONFIG_FILE}), so "
                "nothing says what its settings are; run the grid first, or leave the folder out"
            )
        runs = info.get("runs") if isinstance(info, Mapping) else None
        name = str(info.get("name", path.name)) if isinstance(info, Mapping) else path.name
        grids.append(
            Grid(path, label, name, tuple(ids), run_set, settings, runs if isinstance(runs, Mapping) else {})
        )
    return tuple(grids)


def _labels(paths: Sequence[Path]) -> list[str]:
    """The shortest end of each path that no other path ends with (``smoke``; ``tiny/smoke`` and
    ``chat/smoke`` for two folders named ``smoke``)."""
    out = []
    for p in paths:
        for n in range(1, len(p.parts) + 1):
            tail = p.parts[-n:]
            if all(q.parts[-n:] != tail for q in paths if q != p):
                out.append("/".join(tail))
                break
        else:
            out.append(str(p))
    return out


def is_seed(key: str) -> bool:
    """Whether dotted ``key`` is a run's seed (``seed``, ``trainer.seed``): runs that differ only in
    it are the same settings on other seeds."""
    return key == "seed" or key.endswith(".seed")


def _covered(key: str, names: Collection[str]) -> bool:
    """Whether naming any of ``names`` covers ``key``: the key itself, a key under it, or an
    embedded model's section under ``model``."""
    return any(
        key == n or key.startswith(n + ".") or (n == "model" and key.startswith(_MODEL_SECTIONS))
        for n in names
    )


def _resolve(name: str, keys: Collection[str], diffs: Sequence[Difference], flag: str) -> list[str]:
    """What ``name`` (one entry of ``--across`` or ``--allow-different``, comma-separated names
    allowed) stands for: :data:`FOLDER`, a dotted key (as given, under ``trainer.``, or the one key
    ending in ``.name``) or a section (``task``).

    Raises:
        ReportError: a name that is no setting of these runs, listing the keys that differ.
    """
    out = []
    for n in (p.strip() for p in name.split(",")):
        if not n:
            continue
        if n == FOLDER or n in keys or any(k.startswith(n + ".") for k in keys):
            out.append(n)
            continue
        if f"trainer.{n}" in keys:
            out.append(f"trainer.{n}")
            continue
        ends = sorted(k for k in keys if k.endswith("." + n))
        if len(ends) == 1:
            out.append(ends[0])
            continue
        raise ReportError(
            f"{flag} {n}: "
            + (
                f"{n} could be any of {', '.join(ends)}; give the dotted key"
                if ends
                else "no setting of these runs is called that"
            )
            + f"; the folders are told apart by: {_apart(diffs)} (or name {FOLDER})"
        )
    return out


def _facets(named: Sequence[str], grids: Sequence[Grid], diffs: Sequence[Difference]) -> tuple[str, ...]:
    """The columns the panels are drawn by: each named key, or the keys under a named section
    that differ.

    Raises:
        ReportError: a named key that is the same in every folder, or named keys whose values two
            folders share (they would pool runs of both in one panel).
    """
    keys = {k for g in grids for s in g.settings.values() for k in s}
    facets: list[str] = []
    for n in named:
        if n == FOLDER:
            facets.append(n)
            continue
        under = [d.key for d in diffs if _covered(d.key, (n,)) and not is_seed(d.key)]
        if not under:
            value = (
                sorted({value_text(s.get(n)) for g in grids for s in g.settings.values()})
                if n in keys
                else []
            )
            raise ReportError(
                f"--across {n}: "
                + (f"{', '.join(value)} in every folder" if value else "the same in every folder")
                + f", so it does not tell them apart; the folders are told apart by: {_apart(diffs)} (name "
                f"one of those, or {FOLDER} to compare the folders as such)"
            )
        facets.extend([n] if n in keys else under)
    facets = list(dict.fromkeys(facets))
    if facets and FOLDER not in facets:
        _check_apart(facets, grids)
    return tuple(facets)


def _check_apart(facets: Sequence[str], grids: Sequence[Grid]) -> None:
    """Raise :class:`ReportError` when two folders share a combination of the ``facets``' values."""
    combos = [{tuple(value_text(s.get(k)) for k in facets) for s in g.settings.values()} for g in grids]
    for i, a in enumerate(combos):
        for j in range(i + 1, len(grids)):
            shared = a & combos[j]
            if shared:
                value = ", ".join(f"{k}={v}" for k, v in zip(facets, sorted(shared)[0], strict=True))
                raise ReportError(
                    f"--across {','.join(facets)}: {grids[i].label} and {grids[j].label} both have {value}, so "
                    "a panel would pool runs of both; name a key that tells the folders apart (or "
                    f"{FOLDER}), and lay out a key the grids share with --col or --hue"
                )


def _refusal(
    refused: Sequence[Difference], grids: Sequence[Grid], named: Sequence[str], allowed: Sequence[str]
) -> str:
    """The message refusing differences nobody named: each key with its values per folder, and the
    flags that would accept them."""
    keys = [d.key for d in refused]
    unset = any(NONE in v for d in refused for v in d.values)
    # the key that covers most of the others (model covers its embedded sections) is the suggestion
    across = list(named) or [max(keys, key=lambda k: sum(_covered(o, (k,)) for o in keys))]
    allow = [*allowed, *(k for k in keys if not _covered(k, across))]
    fix = " ".join([f"--across {','.join(across)}", *(f"--allow-different {k}" for k in allow)])
    return (
        f"the folders differ in {len(refused)} setting(s) not named as the comparison, so their runs "
        "cannot be compared as they stand:\n"
        + "\n".join(f"  {d.describe(grids)}" for d in refused)
        + ("\n((none): the runs do not set the key, so its default applies.)" if unset else "")
        + "\nName what the comparison is about with --across KEY (a panel per value), or accept a "
        f"difference with --allow-different KEY (listed in the report); for instance: {fix}"
    )


def _apart(diffs: Sequence[Difference]) -> str:
    """The keys that tell the folders apart (seeds aside), for messages."""
    return ", ".join(d.key for d in diffs if d.disjoint() and not is_seed(d.key)) or "no setting"


def run_signature(settings: Mapping[str, Any], ignored: Sequence[str] = ()) -> tuple[tuple[str, str], ...]:
    """A run's settings as the folders match them: ``(key, value as text)`` sorted, the seed, the
    grid's name and ``ignored`` keys (and the keys under them) aside."""
    return tuple(
        sorted(
            (k, value_text(v))
            for k, v in settings.items()
            if not (is_seed(k) or k in _BOOKKEEPING or _covered(k, ignored))
        )
    )


def _match(
    grids: Sequence[Grid], ignored: Sequence[str]
) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """The runs with a counterpart in every other folder (the same settings, ``ignored`` keys,
    seeds and the grid's name aside), per folder label, and why each other started run has none.

    Raises:
        ReportError: a folder none of whose runs has a counterpart.
    """

    def counts(key: str) -> bool:
        return not (is_seed(key) or key in _BOOKKEEPING or _covered(key, ignored))

    sigs = [{r: run_signature(s, ignored) for r, s in g.settings.items()} for g in grids]
    present = [set(s.values()) for s in sigs]
    kept: dict[str, tuple[str, ...]] = {}
    unmatched: dict[str, str] = {}
    for i, g in enumerate(grids):
        ok = []
        for r, sig in sigs[i].items():
            missing = [h for j, h in enumerate(grids) if j != i and sig not in present[j]]
            if missing:
                unmatched[f"{g.label}/{r}"] = _why_unmatched(g.settings[r], missing, counts)
            else:
                ok.append(r)
        if not ok:
            raise ReportError(
                f"no run of {g.label} has the settings of a run in every other folder (seeds, named and "
                "allowed keys aside), so there is nothing to compare; first run's differences: "
                + _why_unmatched(next(iter(g.settings.values())), [h for h in grids if h is not g], counts)
            )
        kept[g.label] = tuple(ok)
    return kept, unmatched


def _why_unmatched(settings: Mapping[str, Any], others: Sequence[Grid], counts: Callable[[str], bool]) -> str:
    """Why a run with ``settings`` has no counterpart in ``others``: the values no run there has,
    or, when each value is there, that no run there combines them."""
    parts = []
    for h in others:
        keys = {k for s in h.settings.values() for k in s} | set(settings)
        absent = [
            f"{k}={value_text(settings.get(k))}"
            for k in sorted(keys)
            if counts(k)
            and value_text(settings.get(k)) not in {value_text(s.get(k)) for s in h.settings.values()}
        ]
        parts.append(
            f"{', '.join(absent)} in no run of {h.label}"
            if absent
            else f"no run of {h.label} has this combination"
        )
    return "; ".join(parts)


def place(settings: ReportSettings, comparison: Comparison) -> ReportSettings:
    """``settings`` with the comparison's facets as panels: columns when the layout has none,
    else rows when it has none, else in front of the columns. A facet the layout already places
    (``--hue model``) stays where it is."""
    used = [*(settings.hue or ()), *settings.col, *settings.row]

    def placed(f: str) -> bool:
        return any(u in (f, f.rsplit(".", 1)[-1]) or f"trainer.{u}" == f for u in used)

    rest = tuple(f for f in comparison.facets if not placed(f))
    if not rest:
        return settings
    if not settings.col:
        return replace(settings, col=rest)
    if not settings.row:
        return replace(settings, row=rest)
    return replace(settings, col=(*rest, *settings.col))
