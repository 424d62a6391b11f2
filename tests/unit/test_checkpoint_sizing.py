"""The checkpoint sizing rule alone (no Spark): a probe, then a few seconds of measured work per checkpoint.

Speeds are simulated -- a checkpoint of n rows is observed as taking ``overhead + n * per_row`` seconds --
so each test states the figures it expects for a UDF of that speed.
"""

from __future__ import annotations

import itertools

import pytest

from geneva_provider.core.contracts.models import PlanSettings
from geneva_provider.core.contracts.options import BackfillOptions
from geneva_provider.pipeline.stages.checkpoint_sizing import (
    MAX_GROWTH,
    PROBE_ROWS,
    SPEED_KEPT_MIN_ROWS,
    TARGET_CHECKPOINT_SECONDS,
    CheckpointSizer,
    job_sizer,
)

GPU_MODEL = 1.5e-3    # seconds per row: the slow model
VECTORISED = 1e-6     # x * 2 over Arrow arrays
OVERHEAD = 0.02       # a read, a UDF call and a Lance file per checkpoint


def settings_for(**options: int) -> PlanSettings:
    """The settings a plan made with these options holds (bounds resolved as the planner resolves them)."""
    opts = BackfillOptions(**options)
    lo, hi = opts.checkpoint_bounds()
    return PlanSettings(checkpoint_size=opts.initial_checkpoint_size(), min_checkpoint_size=lo,
                        max_checkpoint_size=hi, parallelism=2)


def sizer_for(**options: int) -> CheckpointSizer:
    return CheckpointSizer.of(settings_for(**options))


def run(sizer: CheckpointSizer, per_row: float, checkpoints: int, overhead: float = OVERHEAD) -> list[int]:
    """The sizes of ``checkpoints`` consecutive checkpoints of a UDF taking ``per_row`` seconds a row."""
    sizes = []
    for _ in range(checkpoints):
        n = sizer.size
        sizes.append(n)
        sizer.observe(n, overhead + n * per_row)
    return sizes


def test_checkpoint_size_given_alone_is_always_the_size():
    sizer = sizer_for(checkpoint_size=250)
    assert run(sizer, GPU_MODEL, 6) == [250] * 6
    assert run(sizer, VECTORISED, 6) == [250] * 6


def test_a_slow_model_checkpoints_a_probe_then_a_few_seconds_of_work_each():
    """The issue's GPU model: 10,000 rows (15 s) in its first checkpoint before; now 0.15 s, then ~3 s each."""
    sizes = run(sizer_for(), GPU_MODEL, 8)
    assert sizes[0] == PROBE_ROWS  # 0.15 s of the model: a kill during the probe loses almost nothing
    assert sizes[1] == 1_000       # the min bound: ~x8 growth from the probe would be 800
    assert all(1_900 <= n <= 2_000 for n in sizes[2:]), sizes  # TARGET_CHECKPOINT_SECONDS / 1.5 ms = 2,000
    assert all(OVERHEAD + n * GPU_MODEL <= TARGET_CHECKPOINT_SECONDS + OVERHEAD for n in sizes)


def test_a_fast_udf_reaches_the_max_bound_in_a_few_checkpoints_growing_at_most_x8_a_step():
    sizes = run(sizer_for(), VECTORISED, 8)
    assert sizes[:5] == [100, 1_000, 8_000, 64_000, 100_000]  # the old doubling: 10k, 20k, 40k, 80k, 100k
    assert sizes[5:] == [100_000] * 3
    assert all(b <= max(a * MAX_GROWTH, 1_000) for a, b in itertools.pairwise(sizes))


def test_a_probe_measured_as_taking_no_time_does_not_jump_to_the_max_bound():
    sizer = sizer_for()
    sizer.observe(sizer.size, 0.0)  # a coarse clock
    assert sizer.size == 1_000      # 100 x MAX_GROWTH = 800, raised to the min bound
    sizer.observe(1_000, 0.0)
    assert sizer.size == 8_000


def test_a_udf_that_slows_down_gets_smaller_checkpoints_at_once():
    sizer = sizer_for()
    run(sizer, VECTORISED, 6)
    assert sizer.size == 100_000
    # The data turns hard: the same UDF now takes 1.5 ms a row. The 100,000-row checkpoint took 150 s
    # (the old rule then halved it to 50,000: 75 s more); the next one is back to ~3 s of work.
    sizer.observe(100_000, 100_000 * GPU_MODEL)
    assert sizer.size == 2_000
    assert all(1_950 <= n <= 2_000 for n in run(sizer, GPU_MODEL, 3))  # the 20 ms per checkpoint counted


def test_a_noisy_speed_estimate_is_smoothed_by_time():
    """A short checkpoint (a task's last rows) that happens to be quick hardly moves the estimate."""
    sizer = sizer_for()
    run(sizer, GPU_MODEL, 6)
    settled = sizer.size
    sizer.observe(50, 0.001)  # 50 rows at 50,000 rows/s: noise
    assert sizer.size <= settled * 1.1


def test_the_bounds_hold_after_the_probe():
    sizer = sizer_for(min_checkpoint_size=500, max_checkpoint_size=3_000)
    assert run(sizer, VECTORISED, 5) == [100, 800, 3_000, 3_000, 3_000]
    very_slow = sizer_for(min_checkpoint_size=50, max_checkpoint_size=3_000)
    assert run(very_slow, 0.1, 4) == [50, 50, 50, 50]  # 100 ms a row: the min bound, 5 s a checkpoint
    small_min = sizer_for(min_checkpoint_size=20)      # the probe is never above the min bound
    assert small_min.size == 20


def test_the_next_task_of_a_job_in_a_worker_process_starts_at_the_learnt_size():
    settings = settings_for()
    sizer = job_sizer("job-a", settings)
    run(sizer, VECTORISED, 5)
    assert job_sizer("job-a", settings).size == 100_000  # the job's next task here: no new probe
    assert job_sizer("job-b", settings).size == PROBE_ROWS  # another job (a rerun too) probes again
    assert job_sizer(None, settings) is not job_sizer(None, settings)
    for i in range(20):  # a long-lived worker keeps the latest few jobs only
        job_sizer(f"job-{i}", settings)
    assert job_sizer("job-a", settings).size == PROBE_ROWS


def test_a_job_naming_its_function_starts_at_the_speed_that_function_last_had_in_the_process():
    settings = settings_for()
    chunker = ("split", "v1")
    first = job_sizer("refresh-1", settings, function=chunker)
    assert first.size == PROBE_ROWS  # never measured here: a probe
    run(first, GPU_MODEL, 3, overhead=0)
    learnt = first.size
    # another job of the same function (another view's refresh): no probe, the speed measured
    assert job_sizer("refresh-2", settings, function=chunker).size == learnt
    assert job_sizer(None, settings, function=chunker).size == learnt
    # another function, or the same name at another version, probes
    assert job_sizer("refresh-3", settings, function=("split", "v2")).size == PROBE_ROWS
    assert job_sizer("refresh-4", settings).size == PROBE_ROWS
    # a checkpoint of fewer than SPEED_KEPT_MIN_ROWS rows (the few parents ending a task) is not kept
    tiny = job_sizer("refresh-5", settings, function=("tiny", "v1"))
    tiny.observe(SPEED_KEPT_MIN_ROWS - 1, 0.001)
    assert job_sizer("refresh-6", settings, function=("tiny", "v1")).size == PROBE_ROWS


@pytest.mark.parametrize(("lo", "hi"), [(0, 10), (10, 5)])
def test_bounds_that_cannot_hold_are_refused(lo, hi):
    with pytest.raises(ValueError, match="1 <= min <= max"):
        CheckpointSizer(lo, hi)


def test_chunks_are_checkpointed_unless_computing_them_again_is_cheaper():
    sizer = CheckpointSizer(1_000, 100_000)
    assert not sizer.recomputing_is_cheaper  # nothing measured yet: checkpoint
    # A vectorised function: 100,000 rows computed in 3 ms, their checkpoint stored in 5 ms.
    sizer.observe_costs(100_000, 0.003, 100_000, 0.005)
    assert sizer.recomputing_is_cheaper
    # A model: computing a row costs more than writing and reading its checkpoint back.
    model = CheckpointSizer(1_000, 100_000)
    model.observe_costs(1_000, 1.5, 1_000, 0.002)
    assert not model.recomputing_is_cheaper
    # Once the function slows down (a larger input, a contended device), its chunks are checkpointed again.
    for _ in range(6):
        sizer.observe_costs(100_000, 0.5, 100_000, 0.005)
    assert not sizer.recomputing_is_cheaper
