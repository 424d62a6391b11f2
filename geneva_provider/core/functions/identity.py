"""A UDF's identity: a hash of what the pickled function computes (core).

The version of a UDF column decides whether earlier results can be reused, so it must change
whenever the function would compute something else -- its code, the values its closure captured,
its defaults, and the globals it reads (by value: a module-level constant, a helper function and
what *it* reads) -- and must not change for anything that does not (the file it lives in, its
line numbers, the process that decorated it).  Code in the UDF's own module (which travels pickled
by value) is followed; functions and classes of installed libraries are identified by name.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from typing import Any

import cloudpickle

_PRIMITIVES = (type(None), bool, int, float, complex, str, bytes)


class _Hasher:
    def __init__(self, by_value_modules: set[str]) -> None:
        self.h = hashlib.sha256()
        self.by_value = by_value_modules
        self.seen: dict[int, int] = {}

    def tag(self, *parts: object) -> None:
        for part in parts:
            self.h.update(str(part).encode())
            self.h.update(b"\0")

    def followed(self, obj: Any) -> bool:
        """True for functions and classes whose code travels by value (the UDF's own module)."""
        module = getattr(obj, "__module__", None) or ""
        return module in self.by_value or module == "__main__"

    def value(self, v: Any) -> None:
        if id(v) in self.seen:  # recursion (a function reading itself, a self-referencing structure)
            self.tag("ref", self.seen[id(v)])
            return
        if isinstance(v, _PRIMITIVES):
            self.tag(type(v).__name__, repr(v))
        elif isinstance(v, types.ModuleType):
            self.tag("module", v.__name__)
        elif isinstance(v, types.CodeType):
            self.code(v)
        elif inspect.isfunction(v) or inspect.isclass(v):
            self.seen[id(v)] = len(self.seen)
            if not self.followed(v):
                self.tag("named", getattr(v, "__module__", ""), getattr(v, "__qualname__", repr(v)))
            elif inspect.isfunction(v):
                self.function(v)
            else:
                self.cls(v)
        elif inspect.ismethod(v):
            self.tag("method")
            self.value(v.__func__)
            self.value(v.__self__)
        elif isinstance(v, functools.partial):
            self.tag("partial")
            self.value(v.func)
            self.value(v.args)
            self.value(v.keywords)
        elif isinstance(v, (tuple, list)):
            self.seen[id(v)] = len(self.seen)
            self.tag(type(v).__name__, len(v))
            for item in v:
                self.value(item)
        elif isinstance(v, dict):
            self.seen[id(v)] = len(self.seen)
            self.tag("dict", len(v))
            for key, item in sorted(v.items(), key=lambda kv: repr(kv[0])):
                self.value(key)
                self.value(item)
        elif isinstance(v, (set, frozenset)):
            self.tag(type(v).__name__, sorted(repr(item) for item in v))
        else:
            self.seen[id(v)] = len(self.seen)
            try:  # plain data (numpy arrays, dataclasses, Arrow types...): its pickle is its value
                self.tag("pickle", type(v).__qualname__)
                self.h.update(cloudpickle.dumps(v))
            except Exception:  # noqa: BLE001 - an unpicklable value: fails later, clearly, when the UDF is stored
                self.tag("unpicklable", type(v).__module__, type(v).__qualname__)

    def code(self, code: types.CodeType) -> None:
        # Not co_filename / co_firstlineno / line tables: moving a function does not change it.
        self.tag("code", code.co_name, code.co_argcount, code.co_kwonlyargcount, code.co_flags, code.co_names,
                 code.co_varnames, code.co_freevars, code.co_cellvars)
        self.h.update(code.co_code)
        for const in code.co_consts:
            self.value(const)

    def function(self, fn: types.FunctionType) -> None:
        self.tag("function", fn.__qualname__)
        self.code(fn.__code__)
        self.value(fn.__defaults__)
        self.value(fn.__kwdefaults__)
        for cell in fn.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # an empty cell
                self.tag("empty cell")
        for name in sorted(_global_names(fn.__code__)):
            if name in fn.__globals__:
                self.tag("global", name)
                self.value(fn.__globals__[name])

    def cls(self, cls: type) -> None:
        self.tag("class", cls.__qualname__, [b.__qualname__ for b in cls.__mro__[1:]])
        for name, member in sorted(vars(cls).items()):
            if name in ("__dict__", "__weakref__", "__module__", "__doc__", "__qualname__"):
                continue
            self.tag("member", name)
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = (member.fget, member.fset, member.fdel)
            self.value(member)


def _global_names(code: types.CodeType) -> set[str]:
    """Names a code object (and the code nested in it) may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def udf_fingerprint(func: Any, *extra: object, arguments: Any = None) -> str:
    """A 16-hex-digit hash of what ``func`` computes (plus ``extra``, e.g. its declared type and kind, and the
    ``arguments`` a stateful class is built with, by value: ``Embed(model="m2")`` computes something else)."""
    module = getattr(func, "__module__", None)
    hasher = _Hasher({module} if module else set())
    hasher.value(func)
    hasher.tag(*extra)
    if arguments is not None:
        hasher.tag("arguments")
        hasher.value(arguments)
    return hasher.h.hexdigest()[:16]
