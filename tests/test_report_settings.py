"""harness.config.report_section: the one schema of the report's settings, and what is derived from it."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from analysis import report, smoothing
from harness.config import report_check, report_section
from harness.config.report_section import ReportError, ReportSettings, SmoothingError


def test_the_grid_check_and_the_report_take_their_keys_from_the_settings():
    section = [f.name for f in fields(ReportSettings) if f.metadata["section"]]
    assert tuple(section) == report_section.REPORT_KEYS
    assert report_check.REPORT_KEYS is report_section.REPORT_KEYS  # the grid check's keys
    assert report.ReportSettings is ReportSettings


def test_every_flag_is_a_setting_and_its_value_lands_under_the_settings_name():
    p = argparse.ArgumentParser()
    report.add_arguments(p)
    args = p.parse_args(["g", "--smooth", "window=3", "--hue", "a,b", "--seeds", "--target", "0.5"])
    given = report_section.given_in(args)
    assert given == {"smoothing": {"window": 3}, "hue": "a,b", "seeds": True, "target": 0.5}
    flags = {f.metadata.get("flag") for f in fields(ReportSettings)} - {None}
    assert flags <= {a for action in p._actions for a in action.option_strings}


def test_merged_refuses_a_key_that_is_no_setting():
    with pytest.raises(ReportError, match="unknown report setting"):
        ReportSettings.merged({"hue": "loss_type", "colour": "red"})
    with pytest.raises(ReportError, match="unknown report setting"):
        ReportSettings.merged(None, huee="loss_type")


@pytest.mark.parametrize(
    "bad", [{"window": 2.5}, {"window": 0}, {"ema": 0}, {"ema": 1.5}, "hann", {"box": 3}]
)
def test_one_smoothing_parser_refuses_the_same_settings_everywhere(bad):
    with pytest.raises(SmoothingError):
        report_section.parse_smoothing(bad)
    with pytest.raises(ValueError):
        smoothing.resolve_smoothing(bad, 10)
    with pytest.raises(ReportError):
        ReportSettings.merged({"smoothing": bad})
    problems: list[str] = []
    report_check.check_report({"smoothing": bad}, problems)
    assert problems
    assert report.check_section({"smoothing": bad}, "grid.json")


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
    assert report_section.parse_smoothing_text(text) == setting
