"""Materialized views: a query over a source table kept as its own Lance table.

Creating a view writes one placeholder row per matching source row (its ``__source_row_id``;
``__is_set`` and the view columns stay NULL) -- no UDF runs.  A refresh is the backfill pipeline driven by the
destination: copy tasks read a destination fragment's ``__source_row_id``s, take those rows from
the source, compute the UDF columns, and the same writer and DataReplacement commit land every
view column of the fragment at once.  New source rows are appended as new placeholder fragments
first, so an incremental refresh computes only them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from geneva_provider.apply import udf_for
from geneva_provider.errors import InvalidArgumentError
from geneva_provider.fragments import column_field_ids, deletion_marker, files_holding, leaf_field_ids
from geneva_provider.udf import udf_column_info

if TYPE_CHECKING:
    from geneva_provider.db import Connection
    from geneva_provider.query import Query
    from geneva_provider.table import Table

log = logging.getLogger(__name__)

SOURCE_ROW_ID = "__source_row_id"
IS_SET = "__is_set"
META = "geneva::view::"
META_QUERY = META + "query"
META_BASE_TABLE = META + "base_table"
META_BASE_DB_URI = META + "base_table_db_uri"
META_BASE_VERSION = META + "base_table_version"
META_VERSION = META + "version"
META_SCANNED_ROW_ID = META + "source_next_row_id"  # source rows below this id have been considered


def create_materialized_view(db: Connection, name: str, query: Query, *,
                             max_rows_per_fragment: int | None = None) -> Table:
    """Creates the view table with one placeholder row per matching source row (no UDF runs)."""
    from geneva_provider.table import Table

    spec = query.spec
    if not spec.columns and not spec.udf_columns:
        raise InvalidArgumentError(f"view '{name}': the query selects no columns; call .select(...)")
    if name in db.table_names():
        raise InvalidArgumentError(f"table '{name}' already exists in {db.uri}")
    src = query.table.dataset()
    stable = bool(src.has_stable_row_ids)
    if not stable:
        warnings.warn(f"source table '{spec.base_table}' has no stable row ids: view '{name}' stores row "
                      "addresses (format 1) and can only be refreshed at the source version it was created from; "
                      "create the source with stable_row_ids=True for incremental refreshes", stacklevel=2)
    ids, next_id = _matching_row_ids(src, spec.where, stable)
    ids = _shuffle(ids, spec.shuffle, spec.seed)
    start = spec.offset or 0
    ids = ids[start:start + spec.limit] if spec.limit is not None else ids[start:]

    metadata = {
        META_QUERY: spec.to_json(),
        META_BASE_TABLE: spec.base_table,
        META_BASE_DB_URI: spec.base_table_db_uri,
        META_BASE_VERSION: str(src.version),
        META_VERSION: "2" if stable else "1",
        META_SCANNED_ROW_ID: str(next_id),
    }
    # Only __source_row_id is written; the view columns and __is_set start as all-NULL virtual
    # columns (NULL __is_set: not refreshed yet), so a refresh lands them as one new file per fragment.
    schema = pa.schema([pa.field(SOURCE_ROW_ID, pa.int64(), nullable=False)], metadata=metadata)
    placeholders = pa.table({SOURCE_ROW_ID: pa.array(ids, pa.int64())}, schema=schema)
    view = db.create_table(name, placeholders, max_rows_per_file=max_rows_per_fragment)
    fields = [pa.field(out, src.schema.field(col).type, nullable=True) for out, col in spec.columns.items()]
    fields += [fn.field(out, inputs) for out, (fn, inputs) in spec.udf_columns.items()]
    view.dataset().add_columns([*fields, pa.field(IS_SET, pa.bool_(), nullable=True)])
    log.info("view '%s': %d placeholder rows from table '%s' version %d (format %s)", name, len(ids),
             spec.base_table, src.version, metadata[META_VERSION])
    return Table(db, name)


def _matching_row_ids(ds: Any, where: str | None, stable: bool) -> tuple[np.ndarray, int]:
    """Row ids (stable) or addresses of the rows matching ``where``, in scan order; and the next row id."""
    try:
        t = ds.to_table(columns=[], filter=where, with_row_id=True)
    except Exception as exc:  # Lance raises several types for a bad filter
        raise InvalidArgumentError(f"invalid where filter {where!r}: {str(exc).split(', /')[0]}") from exc
    ids = t.column("_rowid").to_numpy().astype(np.int64)
    all_ids = ds.to_table(columns=[], with_row_id=True).column("_rowid").to_numpy()
    next_id = int(all_ids.max()) + 1 if stable and len(all_ids) else 0
    return ids, next_id


def _shuffle(ids: np.ndarray, shuffle: bool, seed: int | None) -> np.ndarray:
    """The view's row order: a seeded permutation (same seed, same order) or scan order."""
    if not shuffle:
        return ids
    return ids[np.random.default_rng(seed).permutation(len(ids))]


def view_info(ds: Any, name: str) -> dict[str, Any]:
    """The view's stored query and metadata; raises if the table is not a view."""
    md = ds.schema.metadata or {}
    md = {k.decode(): v.decode() for k, v in md.items()}
    if META_QUERY not in md:
        raise InvalidArgumentError(f"table '{name}' is not a materialized view")
    return {"query": json.loads(md[META_QUERY]), "base_table": md[META_BASE_TABLE],
            "base_table_db_uri": md[META_BASE_DB_URI], "base_table_version": int(md[META_BASE_VERSION]),
            "format": md[META_VERSION], "next_row_id": int(md.get(META_SCANNED_ROW_ID, "0"))}


# ------------------------------------------------------------------------- refresh
def append_new_source_rows(view: Table, src: Any, info: dict[str, Any], max_rows_per_fragment: int | None) -> int:
    """Appends placeholders for source rows added since the last refresh; returns how many."""
    import lance

    q = info["query"]
    if info["format"] != "2" or src.version == info["base_table_version"]:
        return 0
    cond = f"_rowid >= {info['next_row_id']}"
    where = f"({q['where']}) AND {cond}" if q.get("where") else cond
    ids, next_id = _matching_row_ids(src, where, True)
    if len(ids):
        # A plan that crashed after appending but before recording next_row_id must not append twice.
        present = view.dataset().to_table(columns=[SOURCE_ROW_ID], filter=f"{SOURCE_ROW_ID} >= {int(ids.min())}")
        ids = ids[~np.isin(ids, present.column(SOURCE_ROW_ID).to_numpy())]
    ids = _shuffle(ids, q["shuffle"], q["seed"])
    if q.get("limit") is not None:
        ids = ids[:max(q["limit"] - view.count_rows(), 0)]
    ds = view.dataset()
    if len(ids):
        table = pa.table({SOURCE_ROW_ID: pa.array(ids, pa.int64())})
        kwargs = {"max_rows_per_file": max_rows_per_fragment} if max_rows_per_fragment else {}
        ds = lance.write_dataset(table, view.uri, mode="append", storage_options=view.storage_options, **kwargs)
    ds.update_schema_metadata({META_BASE_VERSION: str(src.version), META_SCANNED_ROW_ID: str(next_id)})
    return len(ids)


def refresh_job(view: Table, src_version: int | None, max_rows_per_fragment: int | None) -> dict[str, Any]:
    """Brings the placeholders up to the source version and describes the refresh job for the planner."""
    from geneva_provider.db import Connection

    ds = view.dataset()
    info = view_info(ds, view.name)
    src_table = Connection(info["base_table_db_uri"], view.storage_options).open_table(info["base_table"])
    src = src_table.dataset(src_version) if src_version else src_table.dataset()
    if info["format"] == "1" and src.version != info["base_table_version"]:
        raise InvalidArgumentError(
            f"view '{view.name}' stores source row addresses (format 1), valid only at source version "
            f"{info['base_table_version']}, not {src.version}: recreate the source table '{info['base_table']}' "
            "with stable row ids (stable_row_ids=True) and the view on it to refresh to other versions")
    appended = append_new_source_rows(view, src, info, max_rows_per_fragment)
    ds = view.dataset()
    q = info["query"]
    copied = q["columns"]
    udf_cols = list(q["udf_columns"])
    output_columns = [*copied, *udf_cols, IS_SET]
    src_read = list(dict.fromkeys([*copied.values(), *[c for u in q["udf_columns"].values()
                                                       for c in u["input_columns"]]]))
    read_ids = sorted({i for c in src_read for i in column_field_ids(src, c)})
    version = hashlib.md5(json.dumps([q, [udf_column_info(ds.schema.field(c).metadata)["version"]
                                          for c in udf_cols]], sort_keys=True).encode()).hexdigest()[:16]
    return {
        "view": view.name, "appended": appended, "src": src, "src_uri": src_table.uri, "copied": copied,
        "udf_columns": udf_cols, "output_columns": output_columns, "src_read_columns": src_read,
        "src_read_field_ids": read_ids, "format": info["format"], "query_version": version,
        "output_field_ids": [i for c in output_columns for i in leaf_field_ids(ds.lance_schema.field(c))],
    }


def source_files_by_dest_fragment(view_ds: Any, src: Any, read_field_ids: list[int], stable: bool
                                  ) -> dict[int, list[str]]:
    """For each view fragment, the source data files holding its rows' fields (what it depends on).

    One scan of the source's ``_rowid``/``_rowaddr`` (no data columns) maps row ids to source
    fragments; a view fragment is then valid as long as those fragments' files are unchanged, so
    appending to the source never invalidates the rows already refreshed.
    """
    meta = {f.fragment_id: f for f in src.get_fragments()}
    if stable:
        m = src.to_table(columns=[], with_row_id=True, with_row_address=True)
        order = np.argsort(m.column("_rowid").to_numpy())
        sorted_ids = m.column("_rowid").to_numpy()[order]
        frag_of_sorted = (m.column("_rowaddr").to_numpy()[order] >> 32).astype(np.int64)
    out = {}
    for frag in view_ds.get_fragments():
        ids = frag.to_table(columns=[SOURCE_ROW_ID]).column(SOURCE_ROW_ID).to_numpy().astype(np.uint64)
        if stable:
            pos = np.clip(np.searchsorted(sorted_ids, ids), 0, max(len(sorted_ids) - 1, 0))
            frags = set(frag_of_sorted[pos].tolist()) if len(sorted_ids) else set()
        else:
            frags = set((ids >> np.uint64(32)).astype(np.int64).tolist())
        files = []
        for fid in sorted(frags):
            if fid in meta:
                files += files_holding(meta[fid].metadata, read_field_ids)
                files.append(f"deletions:{fid}:{deletion_marker(meta[fid])}")
        out[frag.fragment_id] = files
    return out


class CopyWork:
    """Refresh input: a view fragment's ``__source_row_id``s, the source rows they name, the view columns out."""

    def __init__(self, ctx: dict[str, Any], ds: Any, frag_id: int) -> None:
        import lance

        self.ctx = ctx
        self.source = ctx["source"]
        self.frag = ds.get_fragment(frag_id)
        self.src = lance.dataset(self.source["uri"], version=self.source["version"],
                                 storage_options=ctx["storage_options"])
        self.udfs = {c: udf_for(ds, c) for c in self.source["udf_columns"]}
        self.inputs = {c: udf_column_info(ds.schema.field(c).metadata)["input_columns"]
                       for c in self.source["udf_columns"]}
        self.types = {c: ds.schema.field(c).type for c in ctx["output_columns"]}

    def batches(self, start: int, end: int) -> Any:
        return self.frag.to_batches(columns=[SOURCE_ROW_ID], offset=start, limit=end - start,
                                    with_row_address=True, batch_size=8192)

    def compute(self, chunk: pa.Table) -> dict[str, pa.Array]:
        from geneva_provider.apply import ComputeError
        from geneva_provider.udf import UDFCallError

        ids = chunk.column(SOURCE_ROW_ID).combine_chunks().cast(pa.uint64())
        rows = self.src._take_rows(ids, columns=self.source["read_columns"], ignore_deletions=True)
        out = {name: rows.column(col).combine_chunks().cast(self.types[name])
               for name, col in self.source["copied"].items()}
        for name, fn in self.udfs.items():
            try:
                out[name] = fn.evaluate(rows, self.inputs[name])
            except UDFCallError as exc:
                raise ComputeError(name, fn.name, exc) from exc
        out[IS_SET] = pa.array(np.ones(chunk.num_rows, dtype=bool))
        return out

    def empty(self) -> dict[str, pa.Array]:
        return {c: pa.array([], t) for c, t in self.types.items()}


def plan_refresh(view: Table, src_version: int | None = None, max_rows_per_fragment: int | None = None,
                 options: Any = None, *, store: Any = None, parallelism: int | None = None) -> dict[str, Any]:
    """Plans a refresh: appends placeholders for new source rows, then plans the view's fragments.

    View fragments whose fragment checkpoint still matches the source files they read are reused
    or left alone; everything else is computed by copy tasks.
    """
    import os

    from geneva_provider.checkpoint import job_prefix
    from geneva_provider.plan import BackfillOptions, plan_fragments, store_plan

    if max_rows_per_fragment is not None and max_rows_per_fragment <= 0:
        raise InvalidArgumentError(f"refresh of view '{view.name}': max_rows_per_fragment must be positive")
    options = options or BackfillOptions()
    options.validate(view.name)
    store = store or view.checkpoint_store
    job = refresh_job(view, src_version, max_rows_per_fragment)
    ds = view.dataset()
    src = job["src"]
    src_files = source_files_by_dest_fragment(ds, src, job["src_read_field_ids"], stable=job["format"] == "2")
    prefix = job_prefix("view", job["query_version"], view.name, None, view.uri)
    uids = [udf_column_info(ds.schema.field(c).metadata)["column_uid"] for c in job["udf_columns"]]
    column_uid = ":".join([job["query_version"], *uids])
    fragments, ranges, rows_reused = plan_fragments(ds, store, prefix, src_files, job["output_field_ids"],
                                                    column_uid, None)
    plan = {
        "kind": "refresh",
        "table": view.name,
        "table_uri": view.uri,
        "output_columns": job["output_columns"],
        "where": None,
        "read_version": ds.version,
        "output_field_ids": job["output_field_ids"],
        "column_uid": column_uid,
        "data_storage_version": str(ds.data_storage_version),
        "job_prefix": prefix,
        "rows_appended": job["appended"],
        "source": {"uri": job["src_uri"], "version": src.version, "copied": job["copied"],
                   "udf_columns": job["udf_columns"], "read_columns": job["src_read_columns"]},
    }
    return store_plan(plan, fragments, ranges, rows_reused, options, store, parallelism or os.cpu_count() or 1,
                      f"view '{view.name}' from source version {src.version} ({job['appended']} rows appended)")
