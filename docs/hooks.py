"""mkdocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

- The API reference: one page per public module of the packages in :data:`PACKAGES`, found by
  walking their folders (a module or package whose name starts with ``_`` is private), so a module
  that is added, moved into a subpackage or removed changes the reference without an edit here.
  The pages are generated (never written to ``docs/``) and listed under the nav entry
  :data:`NAV_TITLE`.
- The benchmark outputs: a line ``<!-- benchmark-output: NAME -->`` in a page becomes the text
  files ``results/reference/benchmarks/NAME*.txt`` that the benchmark script wrote, verbatim, or,
  where there is none yet, a note saying so. On the benchmarks page, a script of ``benchmarks/``
  that no marker names gets a section of its own at the end (its docstring's first paragraph and
  its output), so a new script is on the page before anyone writes about it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "analysis")
NAV_TITLE = "API reference"
REFERENCE = "reference"
BENCHMARK_OUTPUTS = ROOT / "results" / "reference" / "benchmarks"
BENCHMARK_SCRIPTS = ROOT / "benchmarks"
BENCHMARKS_PAGE = "benchmarks.md"
#: scripts of benchmarks/ that are no benchmark of their own (gpu_check.py is gpu_check.sh's Python half)
NOT_BENCHMARKS = ("gpu_check",)
MARKER = re.compile(r"^<!-- benchmark-output: ([\w.-]+) -->$", re.M)


def public_modules(root: Path = ROOT) -> list[str]:
    """Dotted names of the public modules and packages under ``PACKAGES``, packages before their
    modules (``harness``, ``harness.bench``, ``harness.bench.common``, ...)."""
    names = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if any(p.startswith("_") for p in parts):
                continue
            if not (path.parent / "__init__.py").exists():
                continue
            names.append(".".join(parts))
    return sorted(names, key=lambda n: n.split("."))


def page_of(module: str) -> str:
    return f"{REFERENCE}/{module}.md"


def reference_nav(modules: list[str]) -> list:
    """The nav of the reference: the index, then each top-level package with its modules."""
    nav: list = [f"{REFERENCE}/index.md"]
    for pkg in PACKAGES:
        nav.append({pkg: [{m: page_of(m)} for m in modules if m == pkg or m.startswith(pkg + ".")]})
    return nav


def on_config(config):
    modules = public_modules()
    for i, entry in enumerate(config["nav"] or []):
        if isinstance(entry, dict) and NAV_TITLE in entry:
            config["nav"][i] = {NAV_TITLE: reference_nav(modules)}
    return config


def _index(modules: list[str]) -> str:
    lines = [
        "# API reference",
        "",
        "Made from the docstrings of the public modules of `harness` and `analysis` (a name that",
        "starts with `_` is private). `analysis` reads a results folder and takes from `harness` only",
        "what [Architecture](../ARCHITECTURE.md) lists: the layout (`harness.layout`), the typed settings",
        "(`harness.settings.schema`), the report's settings and the record of TRL's losses.",
        "",
    ]
    for pkg in PACKAGES:
        lines += [f"## `{pkg}`", ""]
        lines += [f"- [`{m}`]({m}.md)" for m in modules if m == pkg or m.startswith(pkg + ".")]
        lines.append("")
    return "\n".join(lines)


def on_files(files: Files, config) -> Files:
    modules = public_modules()
    files.append(File.generated(config, f"{REFERENCE}/index.md", content=_index(modules)))
    for m in modules:
        files.append(File.generated(config, page_of(m), content=f"# `{m}`\n\n::: {m}\n"))
    return files


def benchmark_output(name: str) -> str:
    """The stored outputs of benchmark NAME as markdown, or the note that there is none."""
    found = sorted(BENCHMARK_OUTPUTS.glob(f"{name}*.txt"))
    if not found:
        return (
            f"*No stored output: `results/reference/benchmarks/{name}.txt` does not exist yet; "
            "the command above prints the table that goes there.*"
        )
    parts = []
    for path in found:
        text = path.read_text().rstrip("\n")
        parts += [f"`results/reference/benchmarks/{path.name}`:", "", "```text", text, "```", ""]
    return "\n".join(parts)


def unmarked_scripts(markdown: str, scripts: Path | None = None) -> list[Path]:
    """The benchmark scripts that no marker of ``markdown`` names."""
    named = set(MARKER.findall(markdown))
    found = sorted((scripts or BENCHMARK_SCRIPTS).glob("*.py"))
    return [p for p in found if p.stem not in named and p.stem not in NOT_BENCHMARKS]


def script_section(path: Path) -> str:
    """A section for a benchmark script: its docstring's first paragraph, how to run it, its output."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    summary = doc.split("\n\n")[0].replace("\n", " ").strip() or "No description."
    return "\n".join(
        [
            f"## `benchmarks/{path.name}`",
            "",
            summary,
            "",
            "```bash",
            f".venv/bin/python benchmarks/{path.name} --help",
            "```",
            "",
            f"<!-- benchmark-output: {path.stem} -->",
            "",
        ]
    )


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page is not None and page.file.src_uri == BENCHMARKS_PAGE:
        extra = [script_section(p) for p in unmarked_scripts(markdown)]
        markdown = markdown.rstrip("\n") + "\n\n" + "\n".join(extra) if extra else markdown
    return MARKER.sub(lambda m: benchmark_output(m.group(1)), markdown)
