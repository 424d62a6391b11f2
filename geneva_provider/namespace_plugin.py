"""Registers :class:`~geneva_provider.namespace.GenevaNamespace` as the Lance namespace ``impl="geneva"``.

``import geneva_provider`` calls :func:`register`, so ``lance_namespace.connect("geneva", {"root": ...})`` works in
any program that imported the package.  Importing ``lance_namespace`` takes seconds (its client's hundreds of
pydantic models), and Airflow imports this package in every process: so when it is not imported yet, the
registration waits for its import (an import hook that registers right after the module ran) instead of importing
it.  Nothing else is imported here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

IMPL = "geneva"
CLASS_PATH = "geneva_provider.namespace.GenevaNamespace"
_MODULE = "lance_namespace"


def register() -> None:
    """Registers the ``geneva`` impl now if ``lance_namespace`` is imported, else when it is."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        _register_in(module)
    elif not any(isinstance(finder, _RegisterOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


def _register_in(module: ModuleType) -> None:
    module.register_namespace_impl(IMPL, CLASS_PATH)


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Finds ``lance_namespace`` as the other finders do, and registers the impl once its module has run."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)  # once, and so that the search below does not find this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _register_in(module)
