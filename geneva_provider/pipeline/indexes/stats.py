"""What an index covers: its segments, the fragments no segment covers, rows indexed and unindexed (pipeline).

A fragment is unindexed when it is new (appended since), rewritten (a backfill's ``DataReplacement`` of the
indexed column un-indexes exactly the fragments it rewrote) or made by a compaction whose index remap did not
cover it: an add-only refresh indexes exactly these.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.index_models import IndexStats
from geneva_provider.core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset

# Lance's names of the scalar and full-text types -> the names a user passes and LanceDB's IndexStatistics gives.
_TYPE_NAMES = {"BTree": "BTREE", "Bitmap": "BITMAP", "LabelList": "LABEL_LIST", "Inverted": "FTS"}


def index_segments(ds: Dataset, index_name: str) -> list[Any]:
    """The committed segments of the index ``index_name`` (Lance's descriptions: uuid, fragment_ids, version)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [i for i in ds.list_indices() if i["name"] == index_name]


def unindexed_fragments(ds: Dataset, index_name: str) -> list[int]:
    """The fragments of ``ds`` no segment of ``index_name`` covers (new, rewritten, remapped), in id order."""
    segments = index_segments(ds, index_name)
    if not segments:
        raise InvalidArgumentError(f"table has no index named '{index_name}' (its indexes: "
                                   f"{sorted({d.name for d in ds.describe_indices()})})")
    covered = {int(f) for s in segments for f in s["fragment_ids"]}
    return sorted(f.fragment_id for f in ds.get_fragments() if f.fragment_id not in covered)


def index_stats(ds: Dataset, index_name: str) -> IndexStats:
    """Rows indexed and unindexed, fragments, segments and IVF partitions of the index ``index_name``."""
    described = {d.name: d for d in ds.describe_indices()}
    if index_name not in described:
        raise InvalidArgumentError(f"table has no index named '{index_name}' (its indexes: {sorted(described)})")
    os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")  # unread here; Lance warns on each call else
    raw = ds.stats.index_stats(index_name)
    partitions = {s["num_partitions"] for s in raw.get("indices", []) if "num_partitions" in s}
    losses = [float(s["loss"]) for s in raw.get("indices", []) if s.get("loss") is not None]
    metrics = sorted({str(s["metric_type"]).lower() for s in raw.get("indices", []) if "metric_type" in s})
    kind = str(raw["index_type"])
    return IndexStats(name=index_name, index_type=_TYPE_NAMES.get(kind, kind),
                      columns=list(described[index_name].field_names),
                      num_indexed_rows=raw["num_indexed_rows"], num_unindexed_rows=raw["num_unindexed_rows"],
                      num_indexed_fragments=raw["num_indexed_fragments"],
                      num_unindexed_fragments=raw["num_unindexed_fragments"],
                      num_segments=len(index_segments(ds, index_name)),
                      num_partitions=max(partitions) if partitions else None,
                      distance_type=metrics[0] if metrics else None, loss=sum(losses) if losses else None)


def list_indices(ds: Dataset) -> list[IndexStats]:
    """Every index of ``ds``, by name."""
    return [index_stats(ds, d.name) for d in sorted(ds.describe_indices(), key=lambda d: d.name)]
