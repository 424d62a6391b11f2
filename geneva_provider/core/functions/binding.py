"""How a user function's parameters bind to input columns: the one signature binder of every decorator (core).

A decorated function (or a stateful class's ``__call__``) is called with its inputs positionally, so
what can be bound is its positional parameters: by default each reads the column of its name, or the
columns ``input_columns=`` names, in order.  A function that takes one argument holding every input
(a ``pa.RecordBatch`` UDF, a batch UDTF's partition) reads ``input_columns`` or everything.  The checks
that a call can ever succeed -- a stateful class with a ``__call__`` (a UDF class may take constructor
arguments, given when it is registered as ``Embed(model="m2")``), no required keyword-only parameter, as
many columns as parameters -- are made here, at decoration, naming the function.

A parameter annotated ``np.ndarray`` (or ``list[...]``) takes a list column's value of each row as a numpy
array (a Python list), as the reference passes them; :meth:`Binding.array_params` says which.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from geneva_provider.core.errors import UDFDefinitionError
from geneva_provider.core.functions.arrow_types import type_hints
from geneva_provider.core.functions.base import check_constructible


@dataclass(frozen=True)
class Binding:
    """A decorated function's signature: what is called, its positional parameters and their annotations."""

    stateful: bool                     # a class: built once per worker (and GPU set), its __call__ is called
    target: Callable[..., Any]         # the function, or the class's __call__
    params: list[inspect.Parameter]    # the positional parameters, without self
    variadic: list[str]                # ``*args`` / ``**kwargs``, as written
    hints: dict[str, Any]              # resolved annotations, "return" included

    @property
    def param_types(self) -> list[Any]:
        """Each positional parameter's annotation (``inspect.Parameter.empty`` without one)."""
        return [self.hints.get(p.name, p.annotation) for p in self.params]

    @property
    def returns(self) -> Any:
        """The return annotation (``inspect.Signature.empty`` without one)."""
        return self.hints.get("return", inspect.Signature.empty)

    @property
    def array_params(self) -> tuple[int, ...]:
        """The positions of the parameters annotated ``np.ndarray`` (``np.ndarray | None`` too)."""
        return tuple(i for i, t in enumerate(self.param_types) if _input_form(t) == "ndarray")

    def check_input_types(self, types: Sequence[pa.DataType | None], inputs: Sequence[str], label: str) -> None:
        """UDFDefinitionError naming the parameter and its column when an ``np.ndarray`` or ``list[...]``
        parameter is given a column that is not a list (``types``: each input's Arrow type, in order)."""
        for p, t, column, dtype in zip(self.params, self.param_types, inputs, types, strict=False):
            form = _input_form(t)
            if form and dtype is not None and not _is_list(dtype):
                shown = "numpy.ndarray" if form == "ndarray" else "a Python list"
                raise UDFDefinitionError(f"{label}: parameter '{p.name}' is annotated {shown}, which takes a list "
                                         f"column (list, large_list or fixed-size list), but input '{column}' is "
                                         f"{dtype}")

    def takes(self, cls: type) -> bool:
        """Whether a positional parameter is annotated ``cls`` (or a subclass)."""
        return any(inspect.isclass(t) and issubclass(t, cls) for t in self.param_types)

    def columns(self, given: list[str] | None, label: str) -> list[str]:
        """The column each parameter reads: ``given`` in order, else the parameters' own names."""
        if self.variadic and not self.params and given is None:
            raise UDFDefinitionError(f"{label} takes only {', '.join(self.variadic)}: its input columns cannot be "
                                     "inferred; declare one parameter per input column")
        inputs = given if given is not None else [p.name for p in self.params]
        if len(inputs) != len(self.params):
            raise UDFDefinitionError(f"{label} takes {len(self.params)} parameters but input_columns names "
                                     f"{len(inputs)}: {inputs}")
        return inputs


def bind(f: Any, label: str, decorator: str, *, construct_later: bool = False) -> Binding:
    """The signature of ``f`` (a function or a stateful class), checked: UDFDefinitionError naming ``label``.

    ``construct_later``: a stateful class may need constructor arguments, given when it is registered
    (checked then); otherwise it must be buildable with none.
    """
    stateful = inspect.isclass(f)
    if stateful:
        _check_stateful_class(f, label, construct_later)
    target = f.__call__ if stateful else f
    if not callable(target):
        raise UDFDefinitionError(f"{decorator} needs a function or a class with __call__, got {f!r}")
    signature = inspect.signature(target).parameters.values()
    params = [p for p in signature if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    # The inputs are passed positionally, in order: nothing can fill a keyword-only parameter.
    required_keywords = [p.name for p in signature if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if required_keywords:
        raise UDFDefinitionError(f"{label}: keyword-only parameters without a default cannot be given "
                                 f"a column, the inputs are passed positionally: {required_keywords}")
    variadic = [f"{'*' if p.kind is p.VAR_POSITIONAL else '**'}{p.name}" for p in signature
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return Binding(stateful=stateful, target=target, params=params[1:] if stateful and params else params,
                   variadic=variadic, hints=type_hints(target))


def input_list(input_columns: Any, label: str, *, distinct: bool = False) -> list[str] | None:
    """``input_columns=`` checked: None, or a list of non-empty column names (each once, if ``distinct``)."""
    if input_columns is None:
        return None
    if isinstance(input_columns, str | bytes) or not isinstance(input_columns, Sequence) or not all(
            isinstance(c, str) and c.strip() for c in input_columns):
        raise UDFDefinitionError(f"{label}: input_columns must be a list of non-empty column names, "
                                 f"got {input_columns!r}")
    if distinct and len(set(input_columns)) != len(input_columns):
        raise UDFDefinitionError(f"{label}: input_columns names a column twice: {list(input_columns)}")
    return list(input_columns)


def _check_stateful_class(cls: type, label: str, construct_later: bool) -> None:
    """A function class is instantiated on each worker and then called: check both can happen."""
    if not any("__call__" in vars(k) for k in cls.__mro__ if k is not object and k.__module__ != "collections.abc"):
        raise UDFDefinitionError(f"{label}: the class {cls.__name__} has no __call__ method; a stateful "
                                 "class computes in __call__")
    if not construct_later:
        check_constructible(cls, (), {}, label)


def _input_form(t: Any) -> str:
    """``"ndarray"`` for an ``np.ndarray`` annotation, ``"list"`` for ``list`` / ``list[T]`` (either optional),
    else ``""``: what a list column's value is passed as."""
    options = [a for a in typing.get_args(t) if a is not type(None)] \
        if typing.get_origin(t) in (typing.Union, types.UnionType) else [t]
    if any(o is np.ndarray or o in ("np.ndarray", "numpy.ndarray") for o in options):
        return "ndarray"
    if any(o is list or typing.get_origin(o) is list for o in options):
        return "list"
    return ""


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or \
        pa.types.is_list_view(t) or pa.types.is_large_list_view(t)
