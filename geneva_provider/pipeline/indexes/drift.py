"""The drift rule: when an add-only refresh retrains an index instead (pipeline).

An index's IVF centroids were trained once; rows added since are encoded against them.  Whether they still
describe the data is measured cheaply, on the driver, from a sample: the **centroid distance** of a set of
vectors is the mean distance of each to its nearest centroid (L2; for ``metric="cosine"`` on unit vectors).
Training records it over a sample of the training rows (``IndexArtifacts.centroid_distance``); a refresh
measures it over a sample of the rows it is about to index, and their ratio is the **drift**.  Past
:data:`DRIFT_RETRAIN_FACTOR` (the new rows sit 1.5x farther from the centroids than the training rows did) the
refresh retrains the index from a new training (``retrain=True``) instead of adding segments encoded with
centroids that no longer fit.  Scalar and full-text indexes train nothing and never drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from geneva_provider.core.contracts.index_models import text_to_array

if TYPE_CHECKING:
    from geneva_provider.core.contracts.index_models import IndexArtifacts
    from geneva_provider.core.lib_types import Dataset

DRIFT_RETRAIN_FACTOR = 1.5  # drift past which a refresh retrains the index
SAMPLE_ROWS = 2_000  # vectors a measure reads at the most


def sample_vectors(ds: Dataset, column: str, fragment_ids: Sequence[int] | None = None,
                   rows: int = SAMPLE_ROWS) -> Any:
    """Up to ``rows`` non-null vectors of ``column`` (from ``fragment_ids`` only, when given), spread over the
    fragments, as a 2-d float32 array."""
    import numpy as np

    wanted = None if fragment_ids is None else set(fragment_ids)
    fragments = [f for f in ds.get_fragments() if wanted is None or f.fragment_id in wanted]
    if not fragments:
        return np.zeros((0, 0), np.float32)
    each = max(1, -(-rows // len(fragments)))
    parts = [f.to_table(columns=[column], filter=f"{column} IS NOT NULL", limit=each).column(column)
             for f in fragments]
    chunks = [c for part in parts for c in part.chunks if len(c)]
    if not chunks:
        return np.zeros((0, 0), np.float32)
    width = chunks[0].type.list_size
    return np.concatenate([c.flatten().to_numpy(zero_copy_only=False).reshape(len(c), width)
                           for c in chunks]).astype(np.float32)


def centroid_distance(vectors: Any, centroids: Any, metric: str) -> float | None:
    """The mean distance of ``vectors`` to their nearest centroid (None: no vectors)."""
    import numpy as np

    if len(vectors) == 0:
        return None
    x, c = np.asarray(vectors, np.float32), np.asarray(centroids, np.float32)
    if metric == "cosine":
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        c = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    nearest = ((x * x).sum(1)[:, None] - 2 * x @ c.T + (c * c).sum(1)[None, :]).min(axis=1)
    return float(np.sqrt(np.maximum(nearest, 0.0)).mean())


def drift(ds: Dataset, artifacts: IndexArtifacts, fragment_ids: Sequence[int]) -> float | None:
    """The drift of ``fragment_ids``'s rows from the index's training (None: nothing to compare, e.g. a scalar
    index, an index trained before the measure was recorded, or no vectors)."""
    if artifacts.centroids is None or not artifacts.centroid_distance:
        return None
    spec = artifacts.spec
    now = centroid_distance(sample_vectors(ds, spec.column, fragment_ids), text_to_array(artifacts.centroids),
                            spec.metric)
    return None if now is None else now / artifacts.centroid_distance
