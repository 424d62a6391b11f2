"""GPU and resource-aware UDFs: ``@udf(num_gpus=, num_cpus=, memory=)`` scheduled by Spark, each task on its own GPU.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/spark/test_gpu_udfs.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.resources import META_RESOURCES
from tests.helpers import events_table


def test_the_connect_server_refuses_more_gpus_than_it_finds_before_starting(tmp_path, monkeypatch, capsys):
    from geneva_provider.connect_server import _free_port, main

    monkeypatch.setenv("GENEVA_FAKE_GPUS", "0")
    t0 = time.perf_counter()
    assert main(["start", "--gpus", "2", "--port", str(_free_port()), "--dir", str(tmp_path)]) == 1
    assert time.perf_counter() - t0 < 10  # no JVM was started
    assert "--gpus 2: the GPU discovery script found 1 GPUs (0;" in capsys.readouterr().err
    assert main(["status", "--dir", str(tmp_path)]) == 3


@pytest.mark.parametrize(("fake", "gpus", "found"), [
    (None, 1, "found 0 GPUs (none;"), ("", 1, "found 0 GPUs (none;"), ("0", 2, "found 1 GPUs (0;"),
])
def test_a_local_session_refuses_more_gpus_than_it_finds_before_starting(monkeypatch, fake, gpus, found):
    """Spark would start a local-cluster whose executor then finds too few GPUs, and die with a Java stack trace."""
    from pyspark import SparkContext

    path = [d for d in os.environ["PATH"].split(os.pathsep) if not os.access(os.path.join(d, "nvidia-smi"), os.X_OK)]
    monkeypatch.setenv("PATH", os.pathsep.join(path))  # the java tripwire stays first: no JVM may start
    assert shutil.which("nvidia-smi") is None
    if fake is None:
        monkeypatch.delenv("GENEVA_FAKE_GPUS", raising=False)
    else:
        monkeypatch.setenv("GENEVA_FAKE_GPUS", fake)
    t0 = time.perf_counter()
    with pytest.raises(gp.ResourceUnavailableError) as caught:
        gp.local_session("local[2]", gpus=gpus)
    assert time.perf_counter() - t0 < 10  # no JVM was started
    message = str(caught.value)
    assert f"local_session('local[2]', gpus={gpus}): the GPU discovery script found" in message
    assert found in message and "nvidia-smi" in message and "GENEVA_FAKE_GPUS" in message
    assert ("ask for at most 1" if fake == "0" else "leave gpus out") in message
    assert isinstance(caught.value, gp.SparkEnvironmentError)
    assert SparkContext._active_spark_context is None


def test_resources_travel_in_the_column_metadata_and_a_udf_without_them_has_none(db):
    @gp.udf(data_type=pa.int64(), num_gpus=0.5, num_cpus=2, memory="512m")
    def asks(x: int) -> int:
        return x

    @gp.udf(data_type=pa.int64())
    def plain(x: int) -> int:
        return x

    tbl = db.create_table("meta", events_table(2))
    tbl.add_columns({"a": asks, "b": plain})
    schema = tbl.dataset().schema
    stored = json.loads(schema.field("a").metadata[META_RESOURCES.encode()])
    assert stored == {"memory": 512 << 20, "num_cpus": 2, "num_gpus": 0.5}
    assert META_RESOURCES.encode() not in schema.field("b").metadata
    assert asks.version == gp.udf(data_type=pa.int64())(asks.func).version  # resources do not change the version
    listed = tbl.udf_columns()
    assert listed["a"]["resources"] == {"num_cpus": 2, "num_gpus": 0.5, "memory": 512 << 20}
    assert listed["b"]["resources"] is None and listed["b"]["name"] == "plain"


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"num_gpus": 1.5}, "num_gpus"), ({"num_gpus": -1}, "num_gpus"), ({"num_gpus": True}, "num_gpus"),
    ({"num_cpus": 0.5}, "num_cpus"), ({"memory": "lots"}, "memory"), ({"memory": -5}, "memory"),
])
def test_bad_resource_asks_are_refused_at_decoration(kwargs, named):
    with pytest.raises(gp.UDFDefinitionError, match=rf"UDF 'greedy'.*{named}"):
        gp.udf(data_type=pa.int64(), name="greedy", **kwargs)(lambda x: x)


def test_good_resource_asks_are_accepted():
    for kwargs in ({"num_gpus": 0.25}, {"num_gpus": 2}, {"num_cpus": 3}, {"memory": 1 << 30}, {"memory": "4g"},
                   {"memory": "512MiB"}):
        assert gp.udf(data_type=pa.int64(), **kwargs)(lambda x: x).resources is not None


def test_task_device_outside_a_spark_task_is_the_cpu():
    assert gp.task_gpus() == [] and gp.task_device() == "cpu"




def _session_offer(master: str, gpus: int):
    """What a ``local_session(master, gpus=gpus)`` session's settings offer a task profile (no JVM)."""
    from geneva_provider.pipeline.spark.runner import gpu_cluster
    from geneva_provider.pipeline.spark.task_resources import SessionOffer

    cluster, conf = gpu_cluster(master, gpus, None)
    settings = {"spark.master": cluster, **conf}
    return SessionOffer({k: settings.get(k) for k in SessionOffer.KEYS})


@pytest.mark.parametrize(("master", "kwargs", "warned"), [
    # Spark runs min(cores // task cpus, GPUs * floor(1 / num_gpus)) tasks at once on an executor.
    ("local[2]", {"num_gpus": 0.5}, "could run 4 tasks at once, but its 2 cores (spark.executor.cores) run only 2 "
     "(each task takes 1 core); give executors at least 4 cores for 4 tasks at once"),
    ("local[4]", {"num_gpus": 0.5, "num_cpus": 2}, "could run 4 tasks at once, but its 4 cores "
     "(spark.executor.cores) run only 2 (each task takes 2 cores); give executors at least 8 cores"),
    ("local[4]", {"num_gpus": 0.5, "memory": "1g"}, "could run 4 tasks at once, but its 4 cores "
     "(spark.executor.cores) run only 1 (each task takes 4 cores so that the executor's memory holds its tasks); "
     "give executors at least 4g of memory (spark.executor.memory) for 4 tasks at once, or ask for less"),
    ("local[4]", {"num_gpus": 0.5}, None), ("local[2]", {"num_gpus": 1}, None), ("local[8]", {"num_gpus": 0.25}, None),
])
def test_executor_cores_that_hold_fewer_tasks_than_the_gpus_are_warned_about(master, kwargs, warned, caplog):
    """``num_gpus=0.5`` on 2 GPUs promises 4 tasks at once, but Spark also needs a free core per task: an executor
    with 2 cores runs 2, silently -- so the package says so, naming the UDF, the numbers and the fix."""
    import warnings

    from geneva_provider.core.resources import ResourceAsk, udf_resources

    offer = _session_offer(master, gpus=2)
    resources = udf_resources("embed", **kwargs)
    asks = [ResourceAsk(udf="embed", column="y", resources=resources)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        offer.warn_if_cores_limit(resources, offer.cpus_for(resources), asks, "backfill of column 'y'")
    messages = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    if warned is None:
        assert messages == [] and not [r for r in caplog.records if r.levelname == "WARNING"]
        return
    assert len(messages) == 1 and warned in messages[0], messages
    assert messages[0].startswith("backfill of column 'y': UDF 'embed' (column 'y') asks for ")
    assert "num_gpus=0.5" in messages[0] and "each executor's 2 GPUs" in messages[0]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == messages


@pytest.mark.parametrize(("executor_gpus", "num_gpus", "tasks"), [
    (2, 0.5, 4), (2, 0.4, 4), (1, 0.25, 4), (1, 0.3, 3), (3, 1 / 3, 9), (2, 1, 2), (4, 2, 2), (3, 2, 1),
])
def test_gpu_slots_follow_sparks_rule_for_fractions_and_whole_numbers(executor_gpus, num_gpus, tasks):
    """A fraction shares an address between floor(1 / num_gpus) tasks, never one task over two addresses."""
    from geneva_provider.pipeline.spark.task_resources import gpu_slots

    assert gpu_slots(executor_gpus, num_gpus) == tasks
