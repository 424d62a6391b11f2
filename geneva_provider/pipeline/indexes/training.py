"""IVF centroids and a PQ codebook trained once, on the driver, on a sample (pipeline).

Every segment of an index is encoded with these same artifacts -- the tasks of a build, a resumed build, an
add-only refresh -- which is what makes segments mergeable and searchable as one index.  Training reads a
sample (``sample_rate`` rows per partition or code, lowered to what the table holds, as pylance samples); encoding
reads every row.

Training runs on the driver alone, so its seconds are the part of a build that more executors do not shorten.
IVF k-means runs up to Lance's 50 iterations (it stops once the centroids settle: 8 on 1M clustered vectors); the
PQ codebook's k-means runs :data:`PQ_MAX_ITERS`, not Lance's 50, which it runs to the end (its time grows with
the count: 5 s at 10, 8 s at 20, 21 s at 50 for a 16 x 256 codebook of 128-d vectors on 2 cores).  On 1M x 128-d
clustered vectors (``benchmarks/index_bench.py``, docs/benchmarks.md) recall@10 of codebooks trained with 10, 20
and 50 iterations differed by no more than two trainings with the same count do (their random samples: up to
0.03).

The IVF centroids are what recall depends on most: PQ encodes each vector's residual from its centroid, and a
k-means run from a random start often ends with two centroids in one cluster and one centroid spanning two
clusters, whose residuals are large and coarsely encoded.  Lance's k-means (in ``create_index`` and in
``IndicesBuilder.train_ivf`` alike) starts from random rows and runs once, so its loss varies from training to
training (the mean squared distance to the nearest centroid, 192 to 236 over five trainings of 256 centroids on
200k clustered vectors, where the clusters' own noise is 128), and recall@10 with it.  So the IVF k-means runs
:data:`IVF_RESTARTS` times, each on its own random sample, and the centroids nearest to a sample of the table
(the centroid distance the drift rule records anyway, ``drift.py``) are kept: the build pays for the extra
runs (a few seconds each: pylance's IVF k-means stops after ~8 iterations on 1M clustered vectors) with fewer
PQ iterations, where more did not raise recall.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from geneva_provider.core.contracts.index_models import IndexArtifacts, array_to_text
from geneva_provider.pipeline.indexes.drift import centroid_distance, sample_vectors

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Dataset
    from geneva_provider.pipeline.indexes.checks import IndexTarget

log = logging.getLogger(__name__)
M = TypeVar("M")

PQ_MAX_ITERS = 15  # k-means iterations of the PQ codebook (Lance's default, 50, triples its training time)
IVF_MAX_ITERS = 50  # Lance's IVF k-means iterations at most, unless the spec's max_iterations says otherwise
IVF_RESTARTS = 3  # IVF k-means runs, the one with the nearest centroids kept


def train_artifacts(ds: Dataset, target: IndexTarget) -> IndexArtifacts:
    """The artifacts of ``target``'s index trained on ``ds`` (the pinned version); none to train for scalar and
    full-text indexes (their record keeps the spec alone)."""
    from lance.indices import IndicesBuilder

    spec = target.spec
    if not spec.index_type.is_vector:
        return IndexArtifacts(spec=spec, trained_at_version=ds.version, trained_rows=target.rows)
    partitions = spec.num_partitions or 1
    builder = IndicesBuilder(ds, spec.column)
    sample = sample_vectors(ds, spec.column)
    ivf_rate = max(1, min(spec.sample_rate, target.rows // partitions))
    ivf_iters = spec.max_iterations or IVF_MAX_ITERS
    ivf, distance = lowest_distance(
        [builder.train_ivf(partitions, distance_type=spec.metric, sample_rate=ivf_rate, max_iters=ivf_iters)
         for _ in range(IVF_RESTARTS)],
        lambda model: _numpy(model.centroids), sample, spec.metric)
    codebook = None
    if spec.index_type.trains_pq:
        pq = builder.train_pq(ivf, spec.num_sub_vectors, num_bits=spec.num_bits, max_iters=PQ_MAX_ITERS,
                              sample_rate=max(1, min(spec.sample_rate, target.rows // 2 ** spec.num_bits)))
        codebook = array_to_text(_numpy(pq.codebook))
    log.info("index '%s': trained %s on column '%s' at version %d (%d rows, %d partitions)", spec.index_name,
             spec.index_type.value, spec.column, ds.version, target.rows, partitions)
    return IndexArtifacts(spec=spec, dimension=target.dimension, trained_at_version=ds.version,
                          trained_rows=target.rows, centroids=array_to_text(_numpy(ivf.centroids)),
                          codebook=codebook, centroid_distance=distance)


def lowest_distance(models: list[M], centroids_of: Callable[[M], Any], sample: Any,
                    metric: str) -> tuple[M, float | None]:
    """The model among ``models`` whose centroids lie nearest to ``sample`` (the lowest centroid distance, the
    k-means loss a restart is judged by), and that distance (None: an empty sample, the first model kept)."""
    scored = [(centroid_distance(sample, centroids_of(model), metric), i) for i, model in enumerate(models)]
    distance, best = min(scored, key=lambda pair: (float("inf") if pair[0] is None else pair[0], pair[1]))
    return models[best], distance


def _numpy(array: object) -> object:
    """A FixedSizeListArray (what Lance's models hold) as a 2-d float32 array."""
    import pyarrow as pa

    if isinstance(array, pa.FixedSizeListArray):
        return array.values.to_numpy(zero_copy_only=False).reshape(len(array), array.type.list_size)
    return array
