"""IVF centroids and a PQ codebook trained once, on the driver, on a sample (pipeline).

Every segment of an index is encoded with these same artifacts -- the tasks of a build, a resumed build, an
add-only refresh -- which is what makes segments mergeable and searchable as one index.  Training reads a
sample (``sample_rate`` rows per partition or code, lowered to what the table holds); encoding reads every row.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from geneva_provider.core.contracts.index_models import IndexArtifacts, array_to_text
from geneva_provider.pipeline.indexes.drift import training_distance

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.pipeline.indexes.checks import IndexTarget

log = logging.getLogger(__name__)


def train_artifacts(ds: Dataset, target: IndexTarget) -> IndexArtifacts:
    """The artifacts of ``target``'s index trained on ``ds`` (the pinned version); none to train for scalar and
    full-text indexes (their record keeps the spec alone)."""
    from lance.indices import IndicesBuilder

    spec = target.spec
    if not spec.index_type.is_vector:
        return IndexArtifacts(spec=spec, trained_at_version=ds.version, trained_rows=target.rows)
    partitions = spec.num_partitions or 1
    builder = IndicesBuilder(ds, spec.column)
    ivf = builder.train_ivf(partitions, distance_type=spec.metric,
                            sample_rate=max(1, min(spec.sample_rate, target.rows // partitions)))
    codebook = None
    if spec.index_type.trains_pq:
        pq = builder.train_pq(ivf, spec.num_sub_vectors, num_bits=spec.num_bits,
                              sample_rate=max(1, min(spec.sample_rate, target.rows // 2 ** spec.num_bits)))
        codebook = array_to_text(_numpy(pq.codebook))
    distance = training_distance(ds, spec.column, _numpy(ivf.centroids), spec.metric)
    log.info("index '%s': trained %s on column '%s' at version %d (%d rows, %d partitions)", spec.index_name,
             spec.index_type.value, spec.column, ds.version, target.rows, partitions)
    return IndexArtifacts(spec=spec, dimension=target.dimension, trained_at_version=ds.version,
                          trained_rows=target.rows, centroids=array_to_text(_numpy(ivf.centroids)),
                          codebook=codebook, centroid_distance=distance)


def _numpy(array: object) -> object:
    """A FixedSizeListArray (what Lance's models hold) as a 2-d float32 array."""
    import pyarrow as pa

    if isinstance(array, pa.FixedSizeListArray):
        return array.values.to_numpy(zero_copy_only=False).reshape(len(array), array.type.list_size)
    return array
