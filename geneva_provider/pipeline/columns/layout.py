"""Output layout repair: in every fragment, a job's output columns are stored all together or not at all.

A job commits one file holding all its output columns per fragment (a UDF column with its
fingerprint column; a view's columns with theirs).  Lance's ``DataReplacement`` accepts such a
file only when its fields are all present in the fragment's files (they are replaced) or all absent
(the file is added); a file whose fields are partly present fails the commit with "Expected to
modify the fragment but no changes were made" -- on every later run.  That state arises when a
fingerprint column was dropped outside the package (pylance) and declared again under a new field
id while the values stayed, or when a view made by an older version gains a fingerprint column.

The repair gives each such fragment an all-NULL file for the columns it lacks.  A NULL fingerprint
means "never computed", so the planner then recomputes exactly the rows it cannot prove valid, and
the job's commit restores the fingerprints; no stored value is lost.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING

import pyarrow as pa

from geneva_provider.core.fragments import column_leaf_ids
from geneva_provider.core.incarnations import incarnations
from geneva_provider.core.refs import TableRef
from geneva_provider.pipeline.columns.commit import commit_column_files

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset, FragmentMeta

log = logging.getLogger(__name__)


def missing_outputs(fragment_meta: FragmentMeta, leaves: dict[str, list[int]]) -> tuple[str, ...]:
    """The output columns a fragment stores no file for, when it stores a file for some other (else empty)."""
    present = {i for df in fragment_meta.files for i in df.fields}
    missing = tuple(c for c, ids in leaves.items() if not present.intersection(ids))
    return missing if len(missing) < len(leaves) else ()


def complete_output_layout(table: TableRef, ds: Dataset, columns: list[str]) -> Dataset:
    """Gives every fragment holding some of ``columns`` an all-NULL file for the others; returns the dataset.

    Commits nothing when no fragment needs it (the common case: a look at the manifest only).
    A fragment another writer filled meanwhile is left to that writer.
    """
    from lance.file import LanceFileWriter
    from lance.fragment import DataFile

    leaves = {c: column_leaf_ids(ds, c) for c in columns}
    groups: dict[tuple[str, ...], dict[int, int]] = {}  # missing columns -> {fragment id: physical rows}
    for frag in ds.get_fragments():
        missing = missing_outputs(frag.metadata, leaves)
        if missing:
            groups.setdefault(missing, {})[frag.fragment_id] = frag.physical_rows
    if not groups:
        return ds
    major, minor = (int(p) for p in str(ds.data_storage_version).split("."))
    version = ds.version
    for missing, fragments in groups.items():
        schema = pa.schema([ds.schema.field(c).remove_metadata() for c in missing])
        ids = [i for c in missing for i in leaves[c]]
        files = {}
        for fid, rows in fragments.items():
            rel = f"{uuid.uuid4().hex}.lance"
            with LanceFileWriter(os.path.join(table.uri, "data", rel), schema, version=f"{major}.{minor}",
                                 storage_options=table.storage_options) as w:
                w.write_batch(pa.record_batch([pa.nulls(rows, f.type) for f in schema], schema=schema))
            files[fid] = DataFile(rel, fields=ids, column_indices=list(range(len(ids))), file_major_version=major,
                                  file_minor_version=minor, file_size_bytes=w.size_bytes)
        outcome = commit_column_files(table.uri, list(missing), files, version, output_field_ids=ids,
                                      incarnations=incarnations(ds, missing), base_files=dict.fromkeys(fragments),
                                      storage_options=table.storage_options, table=table.name)
        version = outcome.version
        log.warning("table '%s': fragments %s stored columns %s without %s (changed outside airflow-provider-geneva);"
                    " gave them empty %s so their rows are recomputed and their fingerprints restored",
                    table.name, sorted(outcome.committed), [c for c in columns if c not in missing], list(missing),
                    list(missing))
    return table.dataset()
