"""What makes two computed values the same: UDF versions and row fingerprints."""

from __future__ import annotations

import datetime as dt
import types

import numpy as np
import pyarrow as pa
import pytest

import geneva_provider as gp
from geneva_provider.core.fingerprints import hash_array, row_fingerprints


def module_udf(source: str, name: str = "user_udfs") -> gp.UDF:
    """The UDF ``f`` defined by ``source`` in a fresh module (as a user's module would be)."""
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module.f


def scaled(factor: int) -> gp.UDF:
    @gp.udf(data_type=pa.int64())
    def f(x: int) -> int:
        return x * factor

    return f


def test_version_follows_closure_values():
    assert scaled(2).version == scaled(2).version
    assert scaled(2).version != scaled(3).version


@pytest.mark.parametrize(("a", "b", "same"), [
    # a module-level constant the UDF reads
    ("K = 2\n@gp.udf\ndef f(x: int) -> int:\n    return x * K\n",
     "K = 3\n@gp.udf\ndef f(x: int) -> int:\n    return x * K\n", False),
    # a helper function the UDF calls, and what the helper reads
    ("def h(x):\n    return x + 1\n@gp.udf\ndef f(x: int) -> int:\n    return h(x)\n",
     "def h(x):\n    return x + 2\n@gp.udf\ndef f(x: int) -> int:\n    return h(x)\n", False),
    ("T = {'a': 1}\ndef h(x):\n    return x + T['a']\n@gp.udf\ndef f(x: int) -> int:\n    return h(x)\n",
     "T = {'a': 5}\ndef h(x):\n    return x + T['a']\n@gp.udf\ndef f(x: int) -> int:\n    return h(x)\n", False),
    # a default argument
    ("@gp.udf\ndef f(x: int, *, k: int = 1) -> int:\n    return x * k\n",
     "@gp.udf\ndef f(x: int, *, k: int = 2) -> int:\n    return x * k\n", False),
    # where the function sits in its file, and unrelated globals, do not matter
    ("@gp.udf\ndef f(x: int) -> int:\n    return x * 2\n",
     "\n\n\nOTHER = 7\n\n@gp.udf\ndef f(x: int) -> int:\n    return x * 2\n", True),
    # a library function is identified by name
    ("import math\n@gp.udf\ndef f(x: float) -> float:\n    return math.sqrt(x)\n",
     "import math\n@gp.udf\ndef f(x: float) -> float:\n    return math.floor(x)\n", False),
    # a stateful UDF: its methods and class attributes
    ("@gp.udf(data_type=pa.int64())\nclass f:\n    k = 1\n    def __call__(self, x: int) -> int:\n"
     "        return x + self.k\n",
     "@gp.udf(data_type=pa.int64())\nclass f:\n    k = 2\n    def __call__(self, x: int) -> int:\n"
     "        return x + self.k\n", False),
])
def test_version_follows_what_the_function_reads(a, b, same):
    prelude = "import pyarrow as pa\nimport geneva_provider as gp\n"
    first, second = module_udf(prelude + a), module_udf(prelude + b)
    assert (first.version == second.version) is same
    assert module_udf(prelude + a).version == first.version  # and it is stable


def test_version_of_a_recursive_function_terminates():
    udf = module_udf("import geneva_provider as gp\ndef g(x):\n    return x if x < 2 else g(x - 1)\n"
                     "@gp.udf\ndef f(x: int) -> int:\n    return g(x)\n")
    assert len(udf.version) == 16


def test_hash_array_is_deterministic_and_value_sensitive():
    arrays = [
        pa.array([1, 2, None, 4], pa.int64()),
        pa.array([1.5, -0.0, None, float("nan")]),
        pa.array(["a", "", None, "ab"]),
        pa.array([b"\x00", b"", None, b"\x00\x00"], pa.binary()),
        pa.array([[1, 2], [], None, [2, 1]], pa.list_(pa.int32())),
        pa.array([[1.0, 2.0], [0.0, 0.0], None, [2.0, 1.0]], pa.list_(pa.float32(), 2)),
        pa.array([{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, None, {"a": 2, "b": "x"}]),
        pa.array([dt.date(2026, 1, 1), dt.date(2026, 1, 2), None, dt.date(1970, 1, 1)]),
        pa.array([True, False, None, True]),
        pa.array(["x", "y", None, "x"]).dictionary_encode(),
    ]
    for arr in arrays:
        h = hash_array(arr)
        assert h.dtype == np.uint64 and len(h) == len(arr)
        assert np.array_equal(h, hash_array(arr)), arr.type
        valid = [int(v) for i, v in enumerate(h) if arr[i].is_valid]
        if not pa.types.is_boolean(arr.type) and not pa.types.is_dictionary(arr.type):
            assert len(set(valid)) == len(valid), arr.type  # distinct values, distinct hashes
    # Slices hash like the values they hold.
    big = pa.array([f"row {i}" * (i % 7) for i in range(10_000)])
    assert np.array_equal(hash_array(big.slice(100, 50)), hash_array(big)[100:150])
    chunked = pa.chunked_array([big.slice(0, 3_000), big.slice(3_000)])
    assert np.array_equal(hash_array(chunked), hash_array(big))


def test_row_fingerprints_follow_every_input_and_the_seed():
    x = pa.array([1, 2, 3])
    s = pa.array(["a", "b", "c"])
    base = row_fingerprints([x, s], "v1").to_pylist()
    assert row_fingerprints([x, s], "v1").to_pylist() == base
    assert row_fingerprints([x, s], "v2").to_pylist() != base
    changed = row_fingerprints([pa.array([1, 5, 3]), s], "v1").to_pylist()
    assert [a == b for a, b in zip(base, changed, strict=True)] == [True, False, True]
    assert row_fingerprints([s, x], "v1").to_pylist() != base  # column order matters
