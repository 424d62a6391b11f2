"""The README's Python blocks run as written: pasted in order into one script, in an empty directory.

So the README cannot drift from the package again. The blocks are taken with a Markdown parser
(markdown-it-py), every ```python fence in order (```bash ones are not run); the script runs in a
subprocess, in a temp dir where the README's relative `lake` lands, with a fresh local Spark session.
After the blocks, a few lines check what a reader of the README expects the lake to hold.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]

# What the README's blocks leave behind, as the README describes it.
EXPECTED = textwrap.dedent("""
    # ---- test_readme.py: what the blocks above left in the lake ----
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
    print("README OK")
""")


def readme_python_blocks() -> list[str]:
    tokens = MarkdownIt("commonmark").parse((ROOT / "README.md").read_text())
    return [t.content for t in tokens if t.type == "fence" and t.info.strip() == "python"]


def test_every_readme_python_block_runs_in_order_as_one_script(tmp_path):
    blocks = readme_python_blocks()
    assert blocks and "gp.connect(" in blocks[0]
    script = "\n".join(f"# ---- README block {i} ----\n{b}" for i, b in enumerate(blocks, 1)) + EXPECTED
    (tmp_path / "readme.py").write_text(script)
    proc = subprocess.run([sys.executable, "readme.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "README OK" in proc.stdout.splitlines(), proc.stdout[-3000:]
