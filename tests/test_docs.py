"""The documentation: the README's shape and first two commands, and the mkdocs site, built with
``--strict`` (broken links, anchors and references fail), with an API reference page for every
public module and the benchmark pages made from the stored outputs."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_README_LINES = 250
TEST_COMMAND = ".venv/bin/python -m pytest -q"


def _hooks():
    # the site's build hooks import mkdocs, the docs extra's: without it there is no site to check
    pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed; pip install -e '.[docs]'")
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_readme_starts_with_the_main_job_then_the_tests():
    first, second = _bash_blocks(README.read_text())[:2]
    assert first.startswith("bash scripts/setup.sh && ") and " run ablations/" in first, first
    assert second == TEST_COMMAND
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert TEST_COMMAND in [line.strip() for line in ci], "CI does not run the README's test command"


def test_the_readme_links_only_to_files_that_exist():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" not in target:
            assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_plugin_page_holds_the_example_package_and_grid():
    text = (REPO / "docs" / "plugins.md").read_text()
    langs = {lang for lang, _ in re.findall(r"```(\w+)\n(.*?)```", text, flags=re.S)}
    assert {"python", "toml", "yaml"} <= langs


def test_a_stored_benchmark_output_is_included_verbatim_and_a_missing_one_is_named(tmp_path, monkeypatch):
    hooks = _hooks()
    monkeypatch.setattr(hooks, "BENCHMARK_OUTPUTS", tmp_path)
    (tmp_path / "overhead.txt").write_text("| arm | s/step |\n| TRL | 0.25 |\n")
    page = "intro\n<!-- benchmark-output: overhead -->\n\n<!-- benchmark-output: plan -->\n"
    out = hooks.on_page_markdown(page, None, None, None)
    assert "| arm | s/step |\n| TRL | 0.25 |" in out and "`results/reference/benchmarks/overhead.txt`" in out
    assert "No stored output: `results/reference/benchmarks/plan.txt`" in out
    assert "benchmark-output" not in out


def test_a_benchmark_script_the_page_does_not_name_gets_a_section_of_its_own(tmp_path):
    hooks = _hooks()
    (tmp_path / "named.py").write_text('"""Named."""\n')
    (tmp_path / "new.py").write_text('"""Time of something new,\nagainst a baseline.\n\nUsage: ..."""\n')
    (tmp_path / "gpu_check.py").write_text('"""Half of a shell script."""\n')
    page = "<!-- benchmark-output: named -->\n"
    (new,) = hooks.unmarked_scripts(page, tmp_path)
    section = hooks.script_section(new)
    assert "## `benchmarks/new.py`" in section and "Time of something new, against a baseline." in section
    assert "<!-- benchmark-output: new -->" in section and "Usage" not in section


def test_every_public_module_has_a_reference_page():
    modules = _hooks().public_modules()
    assert {
        "harness",
        "analysis",
        "harness.settings.schema",
        "analysis.report",
        "harness.losses.compute",
    } <= set(modules)
    assert not [m for m in modules if any(part.startswith("_") for part in m.split("."))]


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed; pip install -e '.[docs]'")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for module in _hooks().public_modules():
        page = site / "reference" / module / "index.html"
        assert page.exists(), f"no API reference page for {module}"
    assert (site / "benchmarks" / "index.html").exists()
