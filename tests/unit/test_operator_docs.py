"""Every argument a user passes to an operator or sensor of the package is documented in its class docstring.

Airflow's docs and IDEs show a class's own docstring: each ``__init__`` parameter (the bases' ones included,
and the job options the plan operators take through ``**kwargs``) has a ``:param`` entry, and an entry says
"(templated)" exactly when the argument is one of the class's ``template_fields``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from airflow.sdk import BaseOperator

import geneva_provider.operators
import geneva_provider.sensors
from geneva_provider.core.docstrings import param_entries


def _classes() -> list[type]:
    found = []
    for package in (geneva_provider.operators, geneva_provider.sensors):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            found += [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, BaseOperator)
                      and c.__module__ == module.__name__ and not c.__name__.startswith("_")]
    return sorted(found, key=lambda c: c.__name__)


def _arguments(cls: type) -> set[str]:
    """The keyword arguments the package's classes in ``cls``'s bases declare (not BaseOperator's)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("geneva_provider") and "__init__" in vars(klass):
            names |= {n for n, p in inspect.signature(klass.__init__).parameters.items()
                      if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return names


CLASSES = _classes()


def test_every_public_operator_and_sensor_is_inspected():
    names = {c.__name__ for c in CLASSES}
    assert {"GenevaSparkApplyOperator", "GenevaPlanBackfillOperator", "GenevaVerifyOperator",
            "GenevaTableChangedSensor", "GenevaCleanupCheckpointsOperator", "GenevaPlanRefreshOperator"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_each_argument_has_a_param_entry_and_templated_says_which(cls):
    entries = param_entries(cls.__doc__)
    wanted = _arguments(cls) | set(cls.template_fields)
    assert not sorted(wanted - set(entries)), f"{cls.__name__}: undocumented {sorted(wanted - set(entries))}"
    templated = {name for name, entry in entries.items() if "(templated)" in entry}
    assert templated == set(cls.template_fields), (
        f"{cls.__name__}: '(templated)' on {sorted(templated - set(cls.template_fields))} but not templated; "
        f"templated but not said: {sorted(set(cls.template_fields) - templated)}")


def test_param_entries_keep_continuation_lines_and_stop_at_prose():
    doc = """Title.

    :param a: first
        continued (templated)
    :param b: second

    Prose after the entries.
    """
    entries = param_entries(doc)
    assert entries == {"a": ":param a: first\n    continued (templated)", "b": ":param b: second"}
