"""The docs' blocks run as written: each page's Python blocks pasted in order into one script, its bash blocks
into one shell script.

So the README and the pages under docs/ cannot drift from the package. The blocks are taken with a
Markdown parser (markdown-it-py), every ```python and ```bash fence in order; ```shell (commands shown,
not run: `make test`, a cluster's own host names), ```text, ```dockerfile and ```mermaid ones are not
run, and a fence of any other or no language fails the test, so no block escapes it unlabelled. Each
page is self-contained, as a reader pasting from one page expects. Its Python script runs in a
subprocess, in its own temp dir where the page's relative `lake` lands, with a fresh local Spark
session. Its shell script runs in one `bash -euo pipefail` with the virtualenv's bin/ first on PATH, a
temporary HOME and AIRFLOW_HOME, in an empty temp dir -- or, for the pages whose commands start "from
the repository's root" (IN_CHECKOUT), in a temp copy of the source tree, where `make` uses the
virtualenv under test rather than setting up a .venv of its own. After a page's blocks, a few lines
check what its reader expects them to have left. A block that fails fails the test naming the page,
the block and the line of the page its fence starts on; a Spark Connect server the shell script
started under its HOME is stopped whatever happened.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]

# Fence languages that are run, and those that are not.
RUN = {"python", "bash"}
NOT_RUN = {"shell", "text", "dockerfile", "mermaid"}


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


def blocks_of(page: str, language: str) -> list[Block]:
    blocks = [(line, code) for lang, line, code in fences(page) if lang == language]
    return [Block(i, line, code) for i, (line, code) in enumerate(blocks, 1)]


def python_blocks(page: str) -> list[Block]:
    return blocks_of(page, "python")


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
    """The page's Python blocks as one script, ending with its checks; and the block each script line belongs to."""
    return joined(page, blocks, "Python", [], EXPECTED.get(page, ""), f"print({'DOCS OK ' + page!r})")


def joined(page: str, blocks: list[Block], language: str, head: list[str], checks: str,
           ok: str) -> tuple[str, dict[int, Block]]:
    """``head``, the blocks in order, the checks, then the line that says it all ran (Python and bash alike)."""
    lines: list[str] = list(head)
    owner: dict[int, Block] = {}
    for block in blocks:
        lines.append(f"# ---- {page}, {language} block {block.number} (page line {block.line}) ----")
        for code_line in block.code.splitlines():
            lines.append(code_line)
            owner[len(lines)] = block
    lines.append(f"# ---- test_readme.py: what the blocks of {page} left behind ----")
    lines.extend(textwrap.dedent(checks).strip().splitlines())
    lines.append(ok)
    return "\n".join(lines) + "\n", owner


def culprit(stderr: str, script: Path, owner: dict[int, Block], page: str) -> str:
    """Which block raised: the outermost traceback frame in the script is the block's own statement."""
    frames = re.findall(rf'File "{re.escape(str(script))}", line (\d+)', stderr)
    if not frames:
        return f"{page}: the script failed outside its blocks"
    return _named(page, owner, int(frames[0]), "Python", "raised")


def _named(page: str, owner: dict[int, Block], line: int, language: str, verb: str) -> str:
    block = owner.get(line)
    if block is None:
        return f"{page}: the checks after its blocks (in tests/system/test_readme.py) failed"
    return f"{page}: {language} block {block.number} (its fence opens at line {block.line} of {page}) {verb}"


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


# ---- The bash blocks ----

# Pages whose commands run from the repository's root: they build from it, or read dags_examples/.
IN_CHECKOUT = {"docs/airflow.md", "docs/deploying.md"}

# What each page's bash blocks leave behind, as the page describes it (bash, after the blocks).
BASH_EXPECTED = {
    "docs/airflow.md": """
        python - <<'EOF'
        import geneva_provider as gp

        tbl = gp.connect(".demo/lake").open_table("events")
        assert tbl.count_rows() == 1000, tbl.count_rows()
        assert tbl.count_rows("words IS NULL") == 0, "the backfill DAG filled every row"
        assert all(r["words"] == len(r["text"].split()) for r in tbl.to_arrow(["text", "words"]).to_pylist())
        EOF
        if geneva-connect-server status > /dev/null; then echo "the page left its server running" >&2; exit 1; fi
    """,
    "docs/deploying.md": """
        python - <<'EOF'
        import glob
        import subprocess
        import sys
        import zipfile

        (wheel,) = glob.glob("dist/airflow_provider_geneva-*-py3-none-any.whl")
        names = set(zipfile.ZipFile(wheel).namelist())
        for name in ("geneva_provider/spark_apps/apply.py", "geneva_provider/discover_gpus.sh",
                     "geneva_provider/connect_server.py", "geneva_provider/worker_daemon.py"):
            assert name in names, (name, wheel)
        entry_points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "geneva-connect-server" in zipfile.ZipFile(wheel).read(entry_points[0]).decode()
        # The zip alone (no installed package) gives the executors the stages' code.
        code = ("import sys; sys.path.insert(0, 'dist/geneva_provider.zip'); "
                "import geneva_provider.pipeline.stages.registry, geneva_provider.spark_apps as a; "
                "assert a.__file__.startswith('dist/geneva_provider.zip'), a.__file__")
        subprocess.run([sys.executable, "-I", "-c", code], check=True)
        EOF
    """,
}


def shell_script_of(page: str, blocks: list[Block]) -> tuple[str, dict[int, Block]]:
    """The page's bash blocks as one script (a failing command names its script line), ending with its checks."""
    trap = "trap 'echo \"test_readme.py: the command at script line $LINENO failed\" >&2' ERR"
    return joined(page, blocks, "bash", [trap], BASH_EXPECTED.get(page, ""), f"echo {('DOCS OK ' + page)!r}")


def shell_culprit(stderr: str, owner: dict[int, Block], page: str) -> str:
    lines = re.findall(r"test_readme\.py: the command at script line (\d+) failed", stderr)
    if not lines:
        return f"{page}: the script failed outside its blocks"
    return _named(page, owner, int(lines[-1]), "bash", "failed")


def shell_env(tmp_path: Path, workdir: Path) -> dict[str, str]:
    """A fresh shell's environment: the virtualenv first on PATH, a temporary HOME and AIRFLOW_HOME, no Airflow
    settings or connections from this process; in a checkout, `make` takes the virtualenv under test as set up."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_")}
    env.update(HOME=str(tmp_path / "home"), AIRFLOW_HOME=str(tmp_path / "home" / "airflow"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    (tmp_path / "home").mkdir()
    if workdir != tmp_path:
        ready = tmp_path / "venv-installed"
        ready.touch()  # newer than the copy's pyproject.toml: its setup rule has nothing to do
        env["MAKEFLAGS"] = f"PY={sys.executable} STAMP={ready}"
    return env


def checkout_copy(tmp_path: Path) -> Path:
    """The source tree as a reader's checkout holds it (no virtualenv, nothing built)."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".demo", "dist", "build", "*.egg-info", "__pycache__", ".*_cache"))
    return repo


PAGES_WITH_BASH = [page for page in doc_pages() if blocks_of(page, "bash")]


@pytest.mark.parametrize("page", PAGES_WITH_BASH)
def test_every_bash_block_of_a_page_runs_in_order_in_one_shell(page, tmp_path):
    from geneva_provider.connect_server import LocalConnectServer

    script, owner = shell_script_of(page, blocks_of(page, "bash"))
    path = tmp_path / "doc.sh"
    path.write_text(script)
    workdir = checkout_copy(tmp_path) if page in IN_CHECKOUT else tmp_path
    env = shell_env(tmp_path, workdir)
    proc = subprocess.Popen(["bash", "-euo", "pipefail", str(path)], cwd=workdir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        LocalConnectServer(directory=tmp_path / "home" / ".geneva" / "connect").stop()
    assert proc.returncode == 0, shell_culprit(stderr, owner, page) + ":\n" + stderr[-5000:]
    assert f"DOCS OK {page}" in stdout.splitlines(), stdout[-3000:]


def test_the_readme_and_user_guide_start_from_a_connection():
    """The pages a newcomer reads first open with `gp.connect(`: what they show runs from an empty directory."""
    for page in ("README.md", "docs/user-guide.md"):
        blocks = python_blocks(page)
        assert blocks and "gp.connect(" in blocks[0].code, page


def test_every_page_with_checks_has_python_blocks():
    """A page whose checks are listed here keeps its blocks (else its checks would silently not run)."""
    assert set(EXPECTED) <= set(PAGES_WITH_PYTHON), set(EXPECTED) - set(PAGES_WITH_PYTHON)
    assert set(BASH_EXPECTED) <= set(PAGES_WITH_BASH), set(BASH_EXPECTED) - set(PAGES_WITH_BASH)
    assert IN_CHECKOUT <= set(PAGES_WITH_BASH), IN_CHECKOUT - set(PAGES_WITH_BASH)


def test_every_fence_says_its_language():
    """A fence is ```python or ```bash (run) or one of the languages not run: an unlabelled one would escape."""
    odd = [f"{page}:{line} ```{lang}" for page in doc_pages() for lang, line, _ in fences(page)
           if lang not in RUN | NOT_RUN]
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


def test_a_failing_bash_block_is_named(tmp_path):
    """The failure message names the page and the bash block whose command failed, under `bash -euo pipefail`."""
    blocks = [Block(1, 10, "export X=1\n"), Block(2, 20, "echo ok\nfalse | cat\necho never\n")]
    script, owner = shell_script_of("docs/example.md", blocks)
    path = tmp_path / "doc.sh"
    path.write_text(script)
    proc = subprocess.run(["bash", "-euo", "pipefail", str(path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "never" not in proc.stdout
    assert shell_culprit(proc.stderr, owner, "docs/example.md") == (
        "docs/example.md: bash block 2 (its fence opens at line 20 of docs/example.md) failed")
