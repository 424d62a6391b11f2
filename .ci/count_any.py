"""Counts `Any` in the function signatures (parameter and return annotations) of the given packages.

Why: issue 21 replaces the `Any` that stood for library types (LanceDataset, SparkSession, fragments,
pyarrow types) with TYPE_CHECKING aliases; this is the reproducible before/after number.
Usage: python .ci/count_any.py geneva_provider/core geneva_provider/pipeline [-v]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _any_in(node: ast.AST | None) -> int:
    """`Any` names (bare, `typing.Any`, or inside a string annotation) in one annotation."""
    if node is None:
        return 0
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _any_in(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return 0
    count = 0
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            count += 1
        elif isinstance(sub, ast.Attribute) and sub.attr == "Any":
            count += 1
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub is not node:
            count += _any_in(sub)
    return count


def count_file(path: Path) -> list[tuple[int, str, int]]:
    """(line, function, count) for each function whose signature names `Any`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            n = sum(_any_in(p.annotation) for p in params if p is not None) + _any_in(node.returns)
            if n:
                hits.append((node.lineno, node.name, n))
    return hits


def main(argv: list[str]) -> int:
    verbose = "-v" in argv
    roots = [Path(a) for a in argv if a != "-v"]
    total = 0
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for line, name, n in count_file(path):
                total += n
                if verbose:
                    print(f"{path}:{line}: {name}: {n}")
    print(f"Any in signatures: {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
