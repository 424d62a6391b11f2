"""``:param`` entries of class docstrings: an operator's docstring documents every argument a user passes.

Airflow's docs and IDEs show a class's own docstring only, so an argument a base class takes (the Spark
stage's connection, a sensor's table) must appear in each concrete class's docstring too.  The base
documents it once; :func:`inherit_params` copies its entries into a subclass's docstring.
"""

from __future__ import annotations

import inspect
import re

_PARAM = re.compile(r"^:param (\w+):")


def param_entries(doc: str | None) -> dict[str, str]:
    """Each ``:param name:`` entry of ``doc`` (its continuation lines included), by name."""
    entries: dict[str, str] = {}
    name: str | None = None
    for line in inspect.cleandoc(doc or "").splitlines():
        match = _PARAM.match(line)
        if match:
            name = match.group(1)
            entries[name] = line
        elif name is not None and line.startswith((" ", "\t")) and line.strip():
            entries[name] += "\n" + line
        else:
            name = None
    return entries


def inherit_params(doc: str | None, *bases_docs: str | None, extra: dict[str, str] | None = None) -> str:
    """``doc`` with the ``:param`` entries of ``bases_docs`` (and ``extra``: name -> entry) it lacks, appended."""
    own = param_entries(doc)
    added: dict[str, str] = {}
    for base in bases_docs:
        for name, entry in param_entries(base).items():
            if name not in own and name not in added:
                added[name] = entry
    for name, entry in (extra or {}).items():
        if name not in own and name not in added:
            added[name] = entry
    text = inspect.cleandoc(doc or "")
    return text + ("\n\n" + "\n".join(added.values()) if added else "") + "\n"


# reStructuredText markup a docstring uses, and what a terminal shows of it.
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)(?:\s*<[^>]*>)?`")  # :class:`~a.B` -> a.B's last part
_LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_{1,2}")                      # `text <url>`_ -> text
_LITERAL = re.compile(r"``(.+?)``")                                      # ``code`` -> code
_INTERPRETED = re.compile(r"`([^`]+)`")                                  # `text` -> text


def plain_text(doc: str | None) -> str:
    """``doc`` without its reStructuredText markup, for a program's ``--help`` (a terminal shows no markup)."""

    def role(match: re.Match[str]) -> str:
        target = match.group(1)
        return target.rsplit(".", 1)[-1] if match.group(0).split("`", 1)[1].startswith("~") else target

    text = _ROLE.sub(role, inspect.cleandoc(doc or ""))
    text = _LINK.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.M)
