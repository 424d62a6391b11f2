"""How a user function's parameters bind to input columns: the one signature binder of every decorator (core).

A decorated function (or a stateful class's ``__call__``) is called with its inputs positionally, so
what can be bound is its positional parameters: by default each reads the column of its name, or the
columns ``input_columns=`` names, in order.  A function that takes one argument holding every input
(a ``pa.RecordBatch`` UDF, a batch UDTF's partition) reads ``input_columns`` or everything.  The checks
that a call can ever succeed -- a stateful class that can be built with no arguments, no required
keyword-only parameter, as many columns as parameters -- are made here, at decoration, naming the
function.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from geneva_provider.core.errors import UDFDefinitionError
from geneva_provider.core.functions.arrow_types import type_hints


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


def bind(f: Any, label: str, decorator: str) -> Binding:
    """The signature of ``f`` (a function or a stateful class), checked: UDFDefinitionError naming ``label``."""
    stateful = inspect.isclass(f)
    if stateful:
        _check_stateful_class(f, label)
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


def _check_stateful_class(cls: type, label: str) -> None:
    """A function class is instantiated with no arguments on each worker and then called: check both can happen."""
    if not any("__call__" in vars(k) for k in cls.__mro__):
        raise UDFDefinitionError(f"{label}: the class {cls.__name__} has no __call__ method; a stateful "
                                 "class computes in __call__")
    try:
        inspect.signature(cls).bind()
    except TypeError as exc:
        raise UDFDefinitionError(f"{label}: a stateful class is created with no arguments on each "
                                 f"worker, but {cls.__name__}() fails: {exc}; give __init__'s parameters "
                                 "defaults, or read settings inside __init__") from None
    except ValueError:
        pass  # no signature to check (a class built in C): the first call reports a failure
