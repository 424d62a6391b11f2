"""Fixtures of the Spark tier's modules (tests/conftest.py has the sessions and servers every tier uses)."""

from __future__ import annotations

import importlib
import sys

import pytest

from tests.helpers import driver_only_package


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A package importable here (this driver) only: (its name, the module)."""
    name, path = driver_only_package(tmp_path)
    monkeypatch.syspath_prepend(path)
    yield name, importlib.import_module(name)
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]
