"""analysis.settings.report: the one definition of the report's settings, and what is derived from it
(the grid check of a ``report:`` section, the check of the section ``grid.json`` recorded, the
command's flags, ``make_report``'s keyword arguments); a module that loads neither pandas nor
matplotlib, as a grid's planning imports it."""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
from dataclasses import fields

import pytest

from analysis import report, smoothing
from analysis.settings import report as report_settings
from analysis.settings import report_values
from analysis.settings.report import ReportSettings
from analysis.settings.report_values import ReportError, SmoothingError
from harness.config import report_check


def test_every_setting_says_what_it_does_takes_and_how_it_is_checked():
    for f in fields(ReportSettings):
        meta = f.metadata
        assert meta["help"] and meta["what"] and callable(meta["check"]), f.name
        problems: list[str] = []
        default = f.default
        if default not in (None, ()):  # a default that is a value passes its own check
            assert meta["check"](default, f.name, problems, report_values.KeyRules()) is not None, f.name
            assert not problems, problems
        assert report_settings.describe(f.name) == meta["help"]


def test_the_grid_check_and_the_report_take_their_keys_from_the_settings():
    section = [f.name for f in fields(ReportSettings) if f.metadata["section"]]
    assert tuple(section) == report_settings.REPORT_KEYS
    assert report.ReportSettings is ReportSettings
    problems: list[str] = []
    assert report_check.check_report({k: None for k in section}, problems) == {} and not problems
    report_check.check_report({"ci": "t"}, problems)  # not a section key
    assert problems and "unknown report key 'ci'" in problems[0]


def test_make_report_takes_every_setting_by_name():
    params = inspect.signature(report.make_report).parameters
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert not {f.name for f in fields(ReportSettings)} & set(params)  # none written out twice
    with pytest.raises(ReportError, match="unknown report setting"):
        report.make_report("nowhere", colour="red")
    with pytest.raises(ReportError, match="x = 'sideways': the x axis is one of step, tokens, time"):
        report.make_report("nowhere", x="sideways")


def test_every_flag_is_a_setting_and_its_value_lands_under_the_settings_name():
    p = argparse.ArgumentParser()
    report.add_arguments(p)
    args = p.parse_args(["g", "--smooth", "window=3", "--hue", "a,b", "--seeds", "--target", "0.5"])
    given = report_settings.given_in(args)
    assert given == {"smoothing": {"window": 3}, "hue": "a,b", "seeds": True, "target": 0.5}
    assert ReportSettings.merged(None, **given).hue == ("a", "b")
    flags = {f.metadata.get("flag") for f in fields(ReportSettings)} - {None}
    assert flags <= {a for action in p._actions for a in action.option_strings}
    helps = {a.dest: a.help for a in p._actions}
    assert all(helps[f.name] == f.metadata["help"] for f in fields(ReportSettings) if "flag" in f.metadata)


def test_merged_refuses_a_key_that_is_no_setting_and_a_value_its_check_refuses():
    with pytest.raises(ReportError, match="unknown report setting"):
        ReportSettings.merged({"hue": "loss_type", "colour": "red"})
    with pytest.raises(ReportError, match="unknown report setting"):
        ReportSettings.merged(None, huee="loss_type")
    with pytest.raises(ReportError, match=r"report.seeds = 'yes': seeds is true or false"):
        ReportSettings.merged({"seeds": "yes"})
    with pytest.raises(ReportError, match=r"target = nan: the target is a finite number"):
        ReportSettings.merged(None, target=float("nan"))


@pytest.mark.parametrize(
    "bad", [{"window": 2.5}, {"window": 0}, {"ema": 0}, {"ema": 1.5}, "hann", {"box": 3}]
)
def test_one_smoothing_parser_refuses_the_same_settings_everywhere(bad):
    with pytest.raises(SmoothingError):
        report_values.parse_smoothing(bad)
    with pytest.raises(ValueError):
        smoothing.resolve_smoothing(bad, 10)
    with pytest.raises(ReportError):
        ReportSettings.merged({"smoothing": bad})
    problems: list[str] = []
    report_check.check_report({"smoothing": bad}, problems)
    assert problems
    assert report.recorded_problems({"smoothing": bad}, "grid.json")


@pytest.mark.parametrize(
    "text, setting",
    [
        ("auto", "auto"),
        ("none", "none"),
        ("window=4", {"window": 4}),
        ("ema=0.25", {"ema": 0.25}),
        (None, None),
    ],
)
def test_the_smooth_flag_reads_as_the_grid_files_setting(text, setting):
    assert report_values.parse_smoothing_text(text) == setting


def test_the_recorded_section_is_checked_by_the_same_checks_with_keys_as_written():
    problems = report.recorded_problems({"hue": 5, "x": "sideways", "colour": "red"}, "grid.json")
    assert problems == [
        "grid.json: report.hue = 5: give a setting key or a non-empty list of them, written like grid keys "
        "(epsilon, task.kwargs.max_digits, seed), e.g. [epsilon, epsilon_high]; null for none.",
        "grid.json: report.x = 'sideways': the x axis is one of step, tokens, time; write e.g. x: step.",
        "grid.json: report.colour: unknown report key 'colour'. Did you mean 'col'? Valid: "
        + ", ".join(report_settings.REPORT_KEYS)
        + ".",
    ]
    # a recorded progression lists each row's runs; its selectors are kept as written
    progression = {
        "rows": [
            {"label": "a", "select": {"anything": 1}, "runs": ["r1"]},
            {"label": "b", "select": {"x": 2}},
        ]
    }
    assert report.recorded_problems({"progression": progression}, "grid.json") == []
    assert ReportSettings.merged({"progression": progression}).progression.rows[0].runs == ("r1",)


def test_the_settings_load_neither_pandas_nor_matplotlib():
    """A grid's planning imports them (``grpo-harness plan`` must stay quick)."""
    code = (
        "import sys, analysis.settings.report, harness.config.report_check; "
        "print(sorted(m for m in ('pandas', 'matplotlib', 'pyarrow', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_package_binds_load_to_the_function_whatever_was_imported_first():
    code = "import analysis.load, analysis; from analysis import load; print(callable(load), analysis.load is load)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True True"
