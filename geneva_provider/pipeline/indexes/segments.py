"""Segment tasks: each encodes one fragment group's segment at the build's pinned version (executor side).

A task first looks in the checkpoint store for its group's finished segment (a killed build run again) and
reports it as found; otherwise it builds the segment with ``create_index_uncommitted(fragment_ids=group,
**artifacts)`` -- shared centroids and codebook, never trained again here -- and records the returned
``lance.dataset.Index`` (it pickles) before reporting it built.  Nothing is committed by a task.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterable, Iterator

from geneva_provider.core.contracts.index_models import (
    IndexArtifacts,
    IndexBuildPlan,
    SegmentRecord,
    SegmentTaskResult,
)
from geneva_provider.core.store.checkpoint import open_store
from geneva_provider.core.store.layout import IndexRecords


def build_segments(plan_json: str, artifacts_json: str, storage_options: dict[str, str] | None,
                   groups: Iterable[int]) -> Iterator[str]:
    """Executor side: the segments of ``groups`` (indexes into the plan's groups), one result (JSON) per group."""
    import lance

    plan = IndexBuildPlan.model_validate_json(plan_json)
    artifacts = IndexArtifacts.model_validate_json(artifacts_json)
    spec = plan.spec
    records = IndexRecords(open_store(plan.store_uri, storage_options), spec.index_name)
    ds = None
    for group in groups:
        done = records.segment(plan.build_id, group)
        if done is not None:
            yield SegmentTaskResult(group=group, built=False, uuid=str(done.lance_index().uuid)).model_dump_json()
            continue
        if ds is None:
            ds = lance.dataset(plan.table_uri, version=plan.read_version, storage_options=storage_options)
        index = ds.create_index_uncommitted(spec.column, spec.index_type.value, name=spec.index_name, replace=True,
                                            fragment_ids=plan.groups[group], **spec.lance_params(),
                                            **artifacts.lance_args())
        records.put_segment(SegmentRecord(build_id=plan.build_id, group=group, fragment_ids=plan.groups[group],
                                          index=base64.b64encode(pickle.dumps(index)).decode("ascii")))
        yield SegmentTaskResult(group=group, built=True, uuid=str(index.uuid)).model_dump_json()
