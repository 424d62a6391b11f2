"""GPU and resource-aware UDFs: ``@udf(num_gpus=, num_cpus=, memory=)`` scheduled by Spark, each task on its own GPU.

The part that needs neither a JVM nor the Airflow DB; the rest is in tests/spark/test_gpu_udfs.py.
"""

from __future__ import annotations

import json
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
    ({"num_gpus": 1.5}, "num_gpus"), ({"num_gpus": -1}, "num_gpus"), ({"num_gpus": 0}, "num_gpus"),
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


