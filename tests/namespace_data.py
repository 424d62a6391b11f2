"""What the Lance namespace tests share -- in process (``tests/spark/test_namespace.py``) and through
``geneva-provider serve`` (``tests/system/test_serve_geneva.py``): the table they start from, its UDF and its
chunker, so both check the same values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa

import geneva_provider as gp

ROWS = 20


class Piece(NamedTuple):
    chunk: str
    start: int


@gp.udf(data_type=pa.int64(), name="times_ten", version="1")
def times_ten(x: int) -> int:
    return x * 10


@gp.chunker
def letters(s: str) -> Iterator[Piece]:
    for i, c in enumerate(s):
        yield Piece(c, i)


def docs() -> pa.Table:
    """The table the tests start from: ``x`` 0..19, ``s`` ``doc<x>``."""
    return pa.table({"x": pa.array(range(ROWS), pa.int64()), "s": [f"doc{x}" for x in range(ROWS)]})


def create_docs(root: str) -> None:
    """Table ``t`` of :func:`docs` in the database at ``root`` (stable row ids: views follow its rows)."""
    gp.connect(root).create_table("t", docs(), stable_row_ids=True)


def create_child_docs(ns: Any, namespace: str) -> list[str]:
    """Table ``docs`` of :func:`docs` in child namespace ``namespace`` of the Lance namespace ``ns``, made as a
    client makes it (create_namespace + create_table); its id, ``[namespace, "docs"]``."""
    import lance_namespace as ln

    from tests.namespace_server import ipc

    ns.create_namespace(ln.CreateNamespaceRequest(id=[namespace]))
    ns.create_table(ln.CreateTableRequest(id=[namespace, "docs"]), ipc(docs()))
    return [namespace, "docs"]


def times_ten_column(ns: Any, table_id: list[str], name: str = "y") -> None:
    """UDF column ``name = times_ten(x)`` declared on table ``table_id`` through ``ns`` (no backfill started)."""
    import lance_namespace as ln
    from lance_namespace_urllib3_client.models import AddColumnsEntry, AddVirtualColumnEntry

    entry = AddVirtualColumnEntry(udf=times_ten.pickled_b64(), udf_name="times_ten", udf_version="1", image="",
                                  input_columns=["x"], outputs=[])
    ns.alter_table_add_columns(ln.AlterTableAddColumnsRequest(
        id=table_id, new_columns=[AddColumnsEntry(name=name, virtual_column=entry)]))
