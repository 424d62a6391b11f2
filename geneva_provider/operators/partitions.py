"""A backfill's ``partition_where``: the rows of one Airflow partition, from the run's partition key.

Airflow 3.2+ gives a DAG run a ``partition_key`` (a partitioned timetable such as ``CronPartitionTimetable``
or ``PartitionedAssetTimetable``, or a manual trigger with a key); the declared mapping
``partition_where="date = {{ partition_key }}"`` turns it into the rows that partition holds.  The key is
text from outside the package (an upstream task, a REST call), so it enters the SQL only as a string
literal: ``{{ partition_key }}`` renders as ``'2024-01-02'``, a quote in the key doubled.  The same mapping
written with single quotes, ``date = '{{ partition_key }}'``, renders the same (the quotes are taken as the
literal's own); any other quoting around it (double quotes, text inside the quotes) is refused.  The mapping is rendered
here, not by Airflow's templating, which would paste the key in raw.

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
        names = meta.find_undeclared_variables(env.parse(template))
    except TemplateSyntaxError as exc:
        raise InvalidArgumentError(f"{subject}: partition_where {template!r} is not a valid template: {exc}") from None
    if names != {KEY}:
        raise InvalidArgumentError(f"{subject}: partition_where {template!r} may use only {{{{ {KEY} }}}} (the DAG "
                                   f"run's partition key), and must use it; it uses {sorted(names)}")
    if _QUOTED_KEY.search(_unquoted(template)):
        raise InvalidArgumentError(
            f"{subject}: partition_where {template!r} puts quotes or text around {{{{ {KEY} }}}}; write it alone, as "
            f"in {EXAMPLE} (or '{{{{ {KEY} }}}}'): the key renders as a quoted SQL string literal ('2024-01-02', "
            "a quote in it doubled)")
    return template


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
