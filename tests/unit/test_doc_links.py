"""The links between the docs resolve: every relative link of the README and docs/ names a file that exists,
and every #anchor a heading of the page it points to.

The docs are split over several pages that link to each other's sections; a heading renamed on one page
would otherwise leave dead links on the others. Anchors are made from headings the way GitHub makes them
(lower case, punctuation dropped, spaces to hyphens, a -1, -2 ... suffix for repeated headings). Links to
the web (http:, https:, mailto:) are not followed.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _tokens(page: Path) -> list:
    return MarkdownIt("commonmark").enable("table").parse(page.read_text())


def slug(text: str) -> str:
    """GitHub's anchor of a heading's text."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of a page (repeated headings get -1, -2, ... as on GitHub)."""
    tokens, seen, found = _tokens(page), {}, set()
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            text = "".join(c.content for c in tokens[i + 1].children if c.type in ("text", "code_inline"))
            base = slug(text)
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    """Every link target of a page (inline links, in any block, tables included)."""
    out = []
    for tok in _tokens(page):
        for child in tok.children or []:
            if child.type == "link_open":
                out.append(child.attrs["href"])
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the links of a page (names relative to ``root``)."""
    broken = []
    for href in links(page):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        name = f"{page.relative_to(root)}: {href}"
        if not target.exists():
            broken.append(f"{name} (no file {target.relative_to(root) if target.is_relative_to(root) else target})")
        elif parts.fragment:
            if target.suffix != ".md":
                broken.append(f"{name} (an anchor into a file that is not Markdown)")
            elif parts.fragment not in anchors(target):
                broken.append(f"{name} (no heading #{parts.fragment} in {target.relative_to(root)})")
    return broken


def test_every_relative_link_and_anchor_resolves():
    broken = [b for page in doc_pages() for b in broken_links(page)]
    assert not broken, "\n".join(broken)


def test_every_page_of_the_docs_is_linked_from_the_readme():
    """The README is the front page: every page under docs/ is one click away from it."""
    linked = {(ROOT / urlsplit(h).path).resolve() for h in links(ROOT / "README.md") if not urlsplit(h).scheme}
    missing = [p.relative_to(ROOT).as_posix() for p in doc_pages()[1:] if p.resolve() not in linked]
    assert not missing, missing


def test_a_dead_link_and_a_dead_anchor_are_found(tmp_path):
    """The checker itself: a link to a missing file and one to a missing heading are both reported."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Options of `backfill` (and `refresh`)\n\ntext\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#options-of-backfill-and-refresh) [ok](#front) [gone](docs/b.md) "
                    "[bad](docs/a.md#options) [web](https://example.com/x#y)\n\n# Front\n")
    assert broken_links(page, tmp_path) == [
        "README.md: docs/b.md (no file docs/b.md)",
        "README.md: docs/a.md#options (no heading #options in docs/a.md)",
    ]
