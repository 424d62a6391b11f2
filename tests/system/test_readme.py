"""The docs' Python blocks run as written: each page's blocks pasted in order into one script, in an empty directory.

So the README and the pages under docs/ cannot drift from the package. The blocks are taken with a
Markdown parser (markdown-it-py), every ```python fence in order (```bash, ```text and ```mermaid ones
are not run, and a fence of any other or no language fails the test, so no Python block escapes it
unlabelled). Each page is self-contained, as a reader pasting from one page expects: its script runs in a
subprocess, in its own temp dir where the page's relative `lake` lands, with a fresh local Spark
session. After a page's blocks, a few lines check what its reader expects the lake to hold. A block
that raises fails the test naming the page, the block and the line of the page its fence starts on.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]

# Fence languages that are not Python and are not run.
NOT_PYTHON = {"bash", "text", "mermaid"}


def doc_pages() -> list[str]:
    """Every page of the docs, in the order they are run: the README, then docs/*.md by name."""
    return ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One ```python fence of a page: its number on the page (from 1), the page line its fence opens on, its code."""

    number: int
    line: int
    code: str


def fences(page: str) -> list[tuple[str, int, str]]:
    """(language, page line of the opening fence, content) of every fenced block of a page."""
    tokens = MarkdownIt("commonmark").parse((ROOT / page).read_text())
    return [(t.info.strip(), t.map[0] + 1, t.content) for t in tokens if t.type == "fence"]


def python_blocks(page: str) -> list[Block]:
    blocks = [(line, code) for lang, line, code in fences(page) if lang == "python"]
    return [Block(i, line, code) for i, (line, code) in enumerate(blocks, 1)]


# What each page's blocks leave behind, as the page describes it.
EXPECTED = {
    "README.md": """
        import geneva_provider as _gp

        _rows = _gp.connect("lake").open_table("events").to_arrow(columns=["x", "y"]).to_pylist()
        assert sorted(r["x"] for r in _rows) == list(range(1100))
        assert all(r["y"] == 2 * r["x"] for r in _rows), "y = double(x) everywhere, the appended rows too"
        _evens = _gp.connect("lake").open_table("evens").to_arrow(columns=["x", "y2"]).to_pylist()
        assert sorted(r["x"] for r in _evens) == list(range(0, 1100, 2))
        assert all(r["y2"] == 2 * r["x"] for r in _evens)
    """,
    "docs/user-guide.md": """
        import geneva_provider as _gp

        _events = _gp.connect("lake").open_table("events").to_arrow(columns=["x", "y", "t", "o", "parse", "embedding"])
        _rows = _events.to_pylist()
        assert sorted(r["x"] for r in _rows) == list(range(1000))
        assert all(r["y"] == 2 * r["x"] for r in _rows), "y = double(x) everywhere"
        assert all(r["t"] == (3 * r["x"] if r["x"] % 2 == 0 else None) for r in _rows), "t only where x % 2 = 0"
        assert all(r["o"] == (r["x"] + 100 if r["x"] > 10 else None) for r in _rows), "o only where x > 10"
        assert all(r["parse"] == r["x"] for r in _rows), "parse: the 3 failed rows were retried with parse_fixed"
        _skipped = [e for e in _gp.connect("lake").open_table("events").get_errors(column="parse").to_pylist()
                    if e["outcome"] == "skipped"]
        assert sorted("malformed record" in e["message"] for e in _skipped) == [True] * 3, _skipped
        assert all(abs(r["embedding"] - r["x"] / 1000) < 1e-6 for r in _rows), "embedding, from backfill_async"
        _evens = _gp.connect("lake").open_table("evens").to_arrow(columns=["x", "y"]).to_pylist()
        assert len(_evens) == 490 and all(r["x"] % 2 == 0 and r["y"] == 2 * r["x"] for r in _evens)
        assert len({r["x"] for r in _evens}) == 490
    """,
    "docs/operations.md": """
        import geneva_provider as _gp

        _tbl = _gp.connect("lake").open_table("events")
        assert res.fragments_removed == 10 and res.fragments_added == 1, res
        assert sorted(_tbl.to_arrow(columns=["x"]).column("x").to_pylist()) == list(range(1000))
    """,
}


def script_of(page: str, blocks: list[Block]) -> tuple[str, dict[int, Block]]:
    """The page's blocks as one script, ending with its checks; and the block each script line belongs to."""
    lines: list[str] = []
    owner: dict[int, Block] = {}
    for block in blocks:
        lines.append(f"# ---- {page}, Python block {block.number} (page line {block.line}) ----")
        for code_line in block.code.splitlines():
            lines.append(code_line)
            owner[len(lines)] = block
    lines.append(f"# ---- test_readme.py: what the blocks of {page} left behind ----")
    lines.extend(textwrap.dedent(EXPECTED.get(page, "")).strip().splitlines())
    lines.append(f"print({'DOCS OK ' + page!r})")
    return "\n".join(lines) + "\n", owner


def culprit(stderr: str, script: Path, owner: dict[int, Block], page: str) -> str:
    """Which block raised: the outermost traceback frame in the script is the block's own statement."""
    frames = re.findall(rf'File "{re.escape(str(script))}", line (\d+)', stderr)
    if not frames:
        return f"{page}: the script failed outside its blocks"
    block = owner.get(int(frames[0]))
    if block is None:
        return f"{page}: the checks after its blocks (in tests/system/test_readme.py) failed"
    return f"{page}: Python block {block.number} (its fence opens at line {block.line} of {page}) raised"


PAGES_WITH_PYTHON = [page for page in doc_pages() if python_blocks(page)]


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON)
def test_every_python_block_of_a_page_runs_in_order_as_one_script(page, tmp_path):
    blocks = python_blocks(page)
    script, owner = script_of(page, blocks)
    path = tmp_path / "doc.py"
    path.write_text(script)
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, culprit(proc.stderr, path, owner, page) + ":\n" + proc.stderr[-5000:]
    assert f"DOCS OK {page}" in proc.stdout.splitlines(), proc.stdout[-3000:]


def test_the_readme_and_user_guide_start_from_a_connection():
    """The pages a newcomer reads first open with `gp.connect(`: what they show runs from an empty directory."""
    for page in ("README.md", "docs/user-guide.md"):
        blocks = python_blocks(page)
        assert blocks and "gp.connect(" in blocks[0].code, page


def test_every_page_with_checks_has_python_blocks():
    """A page whose checks are listed here keeps its Python blocks (else its checks would silently not run)."""
    assert set(EXPECTED) <= set(PAGES_WITH_PYTHON), set(EXPECTED) - set(PAGES_WITH_PYTHON)


def test_every_fence_says_its_language():
    """A fence is ```python (run) or one of the languages that are not Python: an unlabelled one would escape."""
    odd = [f"{page}:{line} ```{lang}" for page in doc_pages() for lang, line, _ in fences(page)
           if lang != "python" and lang not in NOT_PYTHON]
    assert not odd, odd


def test_a_raising_block_is_named(tmp_path):
    """The failure message names the page and the block that raised, not just a line of the joined script."""
    blocks = [Block(1, 10, "x = 1\n"), Block(2, 20, "y = 2\nraise ValueError('boom')\n")]
    script, owner = script_of("docs/example.md", blocks)
    path = tmp_path / "doc.py"
    path.write_text(script)
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert culprit(proc.stderr, path, owner, "docs/example.md") == (
        "docs/example.md: Python block 2 (its fence opens at line 20 of docs/example.md) raised")
