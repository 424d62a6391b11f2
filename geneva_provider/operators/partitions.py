"""A backfill's ``partition_where``: the rows of one Airflow partition, from the run's partition key.

Airflow 3.2+ gives a DAG run a ``partition_key`` (a partitioned timetable such as ``CronPartitionTimetable``
or ``PartitionedAssetTimetable``, or a manual trigger with a key); the declared mapping
``partition_where="date = {{ partition_key }}"`` turns it into the rows that partition holds.  The key is
text from outside the package (an upstream task, a REST call), so it enters the SQL only as a string
literal: ``{{ partition_key }}`` renders as ``'2024-01-02'``, a quote in the key doubled.  The same mapping
written with single quotes, ``date = '{{ partition_key }}'``, renders the same (the quotes are taken as the
literal's own); any other quoting around it (double quotes, text inside the quotes, the key anywhere inside a
quoted string or name of the mapping) is refused, and so is any
Jinja that could take the key out of its quotes (a filter but ``lower`` / ``upper``, an index, a call, an
expression, a statement).  The mapping is rendered here, not by Airflow's templating, which would paste the
key in raw.

Kept free of lance / pyarrow at module load (imported with the operators).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from geneva_provider.core.errors import InvalidArgumentError

KEY = "partition_key"
EXAMPLE = "partition_where=\"date = {{ partition_key }}\""
_QUOTED_KEY = re.compile(r"""['"`]\s*\{\{-?\s*partition_key\b|partition_key\s*-?\}\}\s*['"`]""")
# '{{ partition_key }}' written as the and Airflow's docs show it: the quotes are the literal's own
_STATEMENTS = {"assign": "set", "assignblock": "set", "callblock": "call", "filterblock": "filter"}  # Jinja's names
_CASE_FILTERS = ("lower", "upper")  # filters that change only letters: the quotes stay where they are
_SINGLE_QUOTED_KEY = re.compile(r"""'(\{\{-?\s*partition_key\s*-?\}\})'""")


def _unquoted(template: str) -> str:
    """``template`` with each ``'{{ partition_key }}'`` (the key alone between single quotes) made bare: the
    package quotes the key itself, so both spellings give the same literal."""
    return _SINGLE_QUOTED_KEY.sub(r"\1", template)


def sql_string_literal(value: str) -> str:
    """``value`` as a SQL string literal: in single quotes, each quote in it doubled (SQL's only escape)."""
    return "'" + value.replace("'", "''") + "'"


def _environment() -> Any:
    """A sandboxed Jinja environment where any name but ``partition_key`` is an error, not an empty string."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)


def check_partition_where(template: Any, subject: str) -> str:
    """``template`` if it is a mapping this module can render; else InvalidArgumentError naming ``subject``.

    Checked when the DAG is parsed, so a DAG with a bad mapping fails to import instead of failing each run.
    """
    if not isinstance(template, str) or not template.strip():
        raise InvalidArgumentError(f"{subject}: partition_where must be a SQL filter using {{{{ {KEY} }}}}, such as "
                                   f"{EXAMPLE}; got {template!r}")
    from jinja2 import TemplateSyntaxError, meta

    env = _environment()
    try:
        parsed = env.parse(template)
        names = meta.find_undeclared_variables(parsed)
    except TemplateSyntaxError as exc:
        raise InvalidArgumentError(f"{subject}: partition_where {template!r} is not a valid template: {exc}") from None
    if names != {KEY}:
        raise InvalidArgumentError(f"{subject}: partition_where {template!r} may use only {{{{ {KEY} }}}} (the DAG "
                                   f"run's partition key), and must use it; it uses {sorted(names)}")
    refused = _unsafe_part(parsed)
    if refused is not None:
        raise InvalidArgumentError(
            f"{subject}: partition_where {template!r} holds {refused}, which could take the key out of the quotes it "
            f"renders in; use {{{{ {KEY} }}}} as it is (| lower or | upper at most), as in {EXAMPLE}")
    if _QUOTED_KEY.search(_unquoted(template)):
        raise InvalidArgumentError(
            f"{subject}: partition_where {template!r} puts quotes or text around {{{{ {KEY} }}}}; write it alone, as "
            f"in {EXAMPLE} (or '{{{{ {KEY} }}}}'): the key renders as a quoted SQL string literal ('2024-01-02', "
            "a quote in it doubled)")
    if _key_inside_quotes(env.parse(_unquoted(template))):
        raise InvalidArgumentError(
            f"{subject}: partition_where {template!r} puts {{{{ {KEY} }}}} inside a quoted SQL string or name; the "
            "key renders as a quoted string literal of its own, whose first quote would end the template's and "
            f"leave the key's text as SQL: write {{{{ {KEY} }}}} outside any quotes, as in {EXAMPLE}")
    return template


def _key_inside_quotes(template: Any) -> bool:
    """Whether a ``{{ partition_key }}`` of the parsed ``template`` (SQL text and keys only, as checked before)
    stands inside a quoted string, a double-quoted or backquoted name of its SQL text (SQL comments skipped)."""
    from jinja2 import nodes

    state = ""  # the quote (or comment opener) the SQL text is inside of, "" outside any
    for node in template.body:
        for part in node.nodes:
            if not isinstance(part, nodes.TemplateData):
                if state in _QUOTES:
                    return True
                continue
            state = _sql_state(part.data, state)
    return False


_QUOTES = ("'", '"', "`")


def _sql_state(text: str, state: str) -> str:
    """What the SQL ``text`` leaves open when it starts in ``state``: a quote, ``--`` / ``/*`` (a comment), or ""."""
    i = 0
    while i < len(text):
        if state in _QUOTES:
            end = text.find(state, i)  # a doubled quote closes and opens again: the same state after it
            if end < 0:
                return state
            state, i = "", end + 1
        elif state == "--":
            end = text.find("\n", i)
            if end < 0:
                return state
            state, i = "", end + 1
        elif state == "/*":
            end = text.find("*/", i)
            if end < 0:
                return state
            state, i = "", end + 2
        elif text.startswith(("--", "/*"), i):
            state, i = text[i:i + 2], i + 2
        elif text[i] in _QUOTES:
            state, i = text[i], i + 1
        else:
            i += 1
    return state


def _unsafe_part(template: Any) -> str | None:
    """What in the parsed ``template`` is more than SQL text and ``{{ partition_key }}`` (or one of the filters that
    change only its letters' case), said for a message; None when nothing is.

    A filter (``replace``, ``trim``), an index, a call, an expression or a statement can drop or unbalance the
    quotes the key is rendered in, and the key's text then becomes SQL.
    """
    from jinja2 import nodes

    for node in template.body:
        if not isinstance(node, nodes.Output):
            kind = type(node).__name__.lower()
            return f"a {{% {_STATEMENTS.get(kind, kind)} %}} statement"
        for part in node.nodes:
            if not isinstance(part, nodes.TemplateData) and not _key(part):
                return _described(part)
    return None


def _key(node: Any) -> bool:
    """Whether ``node`` is ``partition_key``, through case filters without arguments at most."""
    from jinja2 import nodes

    while isinstance(node, nodes.Filter) and node.name in _CASE_FILTERS and not (
            node.args or node.kwargs or node.dyn_args or node.dyn_kwargs):
        node = node.node
    return isinstance(node, nodes.Name) and node.name == KEY


def _described(node: Any) -> str:
    """The part of a template a message names: the outermost filter, index or call applied to the key, else the kind
    of expression."""
    from jinja2 import nodes

    if isinstance(node, nodes.Filter):
        chain = []
        while isinstance(node, nodes.Filter):
            chain.append(node)
            node = node.node
        refused = [f for f in chain if f.name not in _CASE_FILTERS or f.args or f.kwargs]
        return f"the filter {refused[-1].name!r}" if refused else _described(node)
    if isinstance(node, nodes.Getitem | nodes.Getattr) and not isinstance(node, nodes.Call):
        return f"an index or attribute of {{{{ {KEY} }}}}"
    if isinstance(node, nodes.Call):
        return "a call"
    return f"an expression ({type(node).__name__})"


def render_partition_where(template: str, partition_key: str) -> str:
    """The filter ``template`` selects for ``partition_key`` (inserted as a SQL string literal)."""
    return str(_environment().from_string(_unquoted(template)).render({KEY: sql_string_literal(partition_key)}))


def combined_where(where: str | None, partition_where: str) -> str:
    """The user's ``where`` AND the partition's filter (each in parentheses), or the partition's alone."""
    return f"({where}) AND ({partition_where})" if where and where.strip() else partition_where


def run_partition_key(context: Mapping[str, Any], subject: str) -> str:
    """The partition key of the running DAG run, else the one key its triggering asset events carry.

    A partitioned asset event starts only partitioned DAGs, whose run has the (mapped) key; the events are
    read for a run that has none.  No key, or events with different keys: InvalidArgumentError naming the
    run, raised in the plan task, before any Spark work.
    """
    key = context.get(KEY)
    if key:
        return str(key)
    events = context.get("triggering_asset_events") or {}
    keys = sorted({str(k) for evs in events.values() for e in evs if (k := getattr(e, KEY, None))})
    run = context.get("run_id")
    if len(keys) == 1:
        return keys[0]
    if keys:
        raise InvalidArgumentError(f"{subject}: partition_where is set but DAG run {run!r} has no partition key and "
                                   f"its triggering asset events carry several: {keys}; schedule the DAG on a "
                                   "partitioned timetable so each run has one key")
    raise InvalidArgumentError(
        f"{subject}: partition_where is set but DAG run {run!r} has no partition key; schedule the DAG with a "
        "partitioned timetable (CronPartitionTimetable, PartitionedAssetTimetable) or trigger it with a "
        "partition_key, or leave partition_where out to compute every row")
