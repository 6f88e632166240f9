"""The report's sections (analysis.report.sections): one module each, listed once in ``MODULES``; a
figure added as docs/reports.md says ("Adding a figure": one module and its line) is computed,
drawn, saved and shown in index.md, and the columns it asks for are read."""

from __future__ import annotations

import importlib
import re
import sys
import types
from pathlib import Path

from analysis_helpers import synthetic_grid

from analysis import report
from analysis.report import sections
from analysis.report.page import Section
from analysis.report.render import in_order

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reports.md"


def _docs_example() -> types.ModuleType:
    """The section module docs/reports.md gives under "Adding a figure", as a module."""
    text = DOCS.read_text().split("## Adding a figure", 1)[1].split("\n## ", 1)[0]
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "SECTION = Section(" in b]
    module = types.ModuleType("final_by_seed")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        exec(compile(code, str(DOCS), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def test_each_section_is_the_module_its_order_names():
    assert [s.name for s in sections.SECTIONS] == list(sections.ORDER)
    assert [m.__name__.rsplit(".", 1)[1] for m in sections.MODULES] == list(sections.ORDER)
    here = {p.stem for p in Path(sections.__file__).parent.glob("*.py")} - {"__init__"}
    assert sorted(sections.ORDER) == sorted(here), "a module in analysis/report/sections/ is not in MODULES"
    for name in sections.ORDER:
        module = importlib.import_module(f"analysis.report.sections.{name}")
        assert isinstance(module.SECTION, Section) and module.SECTION.name == name


def test_lead_puts_the_final_scores_before_the_curves_and_moves_nothing_else():
    names = [s.name for s in in_order(sections.SECTIONS, "final")]
    expected = list(sections.ORDER)
    i, j = expected.index("curves"), expected.index("final")
    expected[i], expected[j] = expected[j], expected[i]
    assert names == expected
    assert [s.name for s in in_order(sections.SECTIONS, "curves")] == list(sections.ORDER)


def test_a_figure_added_as_the_docs_say_is_computed_drawn_and_listed(tmp_path, monkeypatch):
    example = _docs_example()
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, example.SECTION))
    g = tmp_path / "results" / "toy"
    synthetic_grid(g, variants=("grpo", "dapo"), seeds=(0, 1), steps=10)
    out = report.make_report(g)
    index = (out / "index.md").read_text()
    assert "## Final score by seed" in index and "![final by seed](final_by_seed.png)" in index
    assert index.index("## Sequence importance ratio w_seq") < index.index("## Final score by seed")
    assert (out / "final_by_seed.png").stat().st_size > 0 and (out / "final_by_seed.pdf").exists()
    settings = report.ReportSettings(hue=("trainer.loss_type",))
    data = report.compute_report(report.load_report_inputs(g, settings=settings), settings)
    frame = data.numbers("final_by_seed").frame
    assert sorted(frame["variant"]) == ["dapo", "dapo", "grpo", "grpo"] and frame["score"].notna().all()


def test_the_columns_a_section_asks_for_are_read(monkeypatch):
    extra = Section("extra", lambda c: None, lambda n, p: [], columns=lambda s: ["my_plugin/ratio"])
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, extra))
    assert "my_plugin/ratio" in report.report_columns(report.ReportSettings())
