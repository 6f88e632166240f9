"""Function lengths and nesting depths of the project's code, longest first.

Lines of code count a function's lines without its docstring, blank lines or comment-only lines
(a nested function counts within its parent and on its own). Nesting counts the compound
statements (if, for, while, with, try, match, nested def) inside a function, deepest path.

    python scripts/structure.py [--max-lines 60] [--max-depth 4] [PATH ...]

Exits 1 when a function is over either limit, listing every one that is.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPOUND = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.Match,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)
COMPOUND = (*COMPOUND, *([ast.TryStar] if hasattr(ast, "TryStar") else []))  # TryStar: Python >= 3.11


def code_lines(source: str) -> set[int]:
    """Line numbers holding code (not blank, not only a comment)."""
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
        ):
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def depth(node: ast.AST) -> int:
    """Deepest chain of compound statements below ``node`` (``node`` itself not counted)."""
    best = 0
    for child in ast.iter_child_nodes(node):
        d = depth(child)
        best = max(best, d + 1 if isinstance(child, COMPOUND) else d)
    return best


def functions(path: Path) -> list[tuple[str, int, int, int]]:
    """``(qualified name, first line, lines of code, nesting depth)`` of every function in a file."""
    source = path.read_text()
    tree = ast.parse(source)
    code = code_lines(source)
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                doc = set()
                first = child.body[0] if child.body else None
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)
                ):
                    doc = set(range(first.lineno, first.end_lineno + 1))
                body_start = child.body[0].lineno if child.body else child.lineno
                span = set(range(body_start, child.end_lineno + 1)) - doc
                name = f"{prefix}{child.name}"
                out.append((name, child.lineno, len(span & code), depth(child)))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["harness", "analysis"])
    ap.add_argument("--max-lines", type=int, default=60)
    ap.add_argument("--max-depth", type=int, default=4)
    args = ap.parse_args(argv)
    rows = []
    for p in args.paths:
        base = ROOT / p
        for path in sorted(base.rglob("*.py") if base.is_dir() else [base]):
            rel = path.relative_to(ROOT)
            rows += [(f"{rel}:{line}", name, n, d) for name, line, n, d in functions(path)]
    over = [r for r in rows if r[2] > args.max_lines or r[3] > args.max_depth]
    over.sort(key=lambda r: (-r[2], -r[3]))
    print(
        f"{len(rows)} functions; {len(over)} over {args.max_lines} lines of code or {args.max_depth} levels deep"
    )
    for where, name, n, d in over:
        print(f"{n:5d} lines  depth {d}  {name}  ({where})")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
