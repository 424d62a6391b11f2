"""What every user function is, whatever it computes: the base of ``@udf``, ``@chunker`` and ``@udtf`` (core).

A UDF computes a column, a chunker or a batch UDTF computes a view's rows, but each is the same thing to
the rest of the package: a function (or a stateful class, instantiated once per worker and GPU set) with
a name, a version (a hash of what it computes), the columns it reads, an error policy, the resources each
Spark task running it asks for, and its outputs as an Arrow schema.  It travels pickled by value in the
table's metadata and is loaded back with a type check.  That shared part lives here once; ``udf.py`` and
``udtf.py`` add only how each kind is called.

The field names are part of the stored format: a pickled function restores its fields by name, so a field
is never renamed, and a field added later needs a class-level default (what an older pickle reads).
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import cloudpickle
import pyarrow as pa

from geneva_provider.core.contracts.kinds import RowOutcome
from geneva_provider.core.devices import device_instance
from geneva_provider.core.error_policy import ErrorPolicy, Outcome, RowFailure, error_policy
from geneva_provider.core.errors import SparkEnvironmentError, UDFDefinitionError
from geneva_provider.core.manifest import missing_module_advice
from geneva_provider.core.resources import UDFResources, udf_resources

F = TypeVar("F", bound="UserFunction")


class UDFCallError(Exception):
    """A user function's call failed (or returned what does not fit); ``index`` is the failing row or parent."""

    def __init__(self, message: str, index: int | None = None, original: BaseException | None = None):
        super().__init__(message)
        self.index = index
        self.original = original


@dataclass(kw_only=True)
class UserFunction:
    """A user function plus what is needed to run it anywhere: the shared base of UDF and UDTF."""

    noun: ClassVar[str] = "function"           # how messages name it: "UDF 'f'"
    stored_in: ClassVar[str] = "metadata"      # where its pickle is kept, for the loading error

    func: Callable[..., Any] | type
    name: str
    version: str
    input_columns: list[str] | None
    stateful: bool = False
    on_error: ErrorPolicy = field(default_factory=ErrorPolicy)  # what a failing call does: fail, retry, skip
    resources: UDFResources | None = None  # CPUs, GPUs, memory per Spark task (None: asks for nothing)
    # A stateful class's constructor arguments, as registered (``Embed(model="m2")``); None: not given, it is
    # built with none.  Pickled with the function, so every worker builds the same instance.
    init_args: tuple[Any, ...] | None = None
    init_kwargs: tuple[tuple[str, Any], ...] = ()
    # A stateful function's instances, by the GPU addresses of the task that created them (() without GPUs).
    _instances: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        """The fields to pickle, without the instances built in this process: a stateful function tried
        locally before it is registered travels as its class and arguments, never with a loaded model."""
        return {**self.__dict__, "_instances": {}}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the wrapped function directly, so a decorated function stays usable (and testable)."""
        return self._callable()(*args, **kwargs)

    def _callable(self) -> Callable[..., Any]:
        """The function, or this worker's instance of a stateful class (one per process and GPU set)."""
        return device_instance(self.func, self.stateful, self._instances, self.init_args or (), dict(self.init_kwargs))

    def _instance(self) -> Callable[..., Any]:
        """:meth:`_callable` for a job: a stateful class whose ``__init__`` fails is a failed call."""
        try:
            return self._callable()
        except Exception as exc:
            raise UDFCallError(f"{type(exc).__name__} while creating the stateful {self.label}: {exc}",
                               original=exc) from exc

    @property
    def label(self) -> str:
        """``UDF 'name'``: how errors name this function."""
        return f"{self.noun} '{self.name}'"

    def outputs(self) -> pa.Schema:
        """What one call computes, as Arrow fields (one for a UDF; a view's row columns for a UDTF)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ failures
    def _settle(self, outcome: Outcome, index: int | None, failures: list[RowFailure] | None) -> Any:
        """The call's value (None for a skipped one); lists a failed attempt in ``failures``, and raises
        UDFCallError naming the row (or parent) ``index`` when the policy fails the job."""
        exc = outcome.error
        if exc is None:
            return outcome.value
        state = RowOutcome.RECOVERED if outcome.ok else RowOutcome.SKIPPED if outcome.skipped else RowOutcome.FAILED
        if failures is not None:
            failures.append(RowFailure(index=index if index is not None else -1, error_type=type(exc).__name__,
                                       message=str(exc)[:2_000], traceback=outcome.trace,
                                       attempts=outcome.attempts, outcome=state))
        if outcome.ok or outcome.skipped:
            return outcome.value
        tries = f" (after {outcome.attempts} attempts)" if outcome.attempts > 1 else ""
        raise UDFCallError(f"{type(exc).__name__}: {exc}{tries}", index=index, original=exc) from exc

    # ------------------------------------------------------------------ travel
    def pickled(self) -> bytes:
        """The function pickled by value; UDFDefinitionError naming what cannot be pickled (a lock, a socket...),
        or a stateful class that its workers could not build with the arguments it was given."""
        if self.stateful and isinstance(self.func, type):
            check_constructible(self.func, self.init_args or (), dict(self.init_kwargs), self.label)
        try:
            return dumps_by_value(self)
        except Exception as exc:  # noqa: BLE001 - cloudpickle raises TypeError, PicklingError, AttributeError...
            raise UDFDefinitionError(
                f"{self.label} cannot be pickled to run on Spark executors ({type(exc).__name__}: {exc}); "
                "create unpicklable state (locks, clients, connections) inside the function or in a stateful "
                "class's setup()") from None

    def pickled_b64(self) -> str:
        """:meth:`pickled` as base64 text, as table metadata stores it."""
        return base64.b64encode(self.pickled()).decode("ascii")

    @classmethod
    def load(cls: type[F], pickle_b64: str) -> F:
        """Rebuilds a function of this class from its base64 pickle; UDFDefinitionError if it holds another."""
        try:
            obj = cloudpickle.loads(base64.b64decode(pickle_b64))
        except ModuleNotFoundError as exc:  # the function refers to a module that is not here (a Spark worker)
            raise SparkEnvironmentError(f"the geneva {cls.noun} in the {cls.stored_in} cannot be loaded: "
                                        f"{missing_module_advice(exc.name)}") from None
        if not isinstance(obj, cls):
            raise UDFDefinitionError(f"{cls.stored_in} holds a {type(obj).__name__}, not a geneva {cls.noun}")
        return obj


def check_constructible(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any], label: str) -> None:
    """UDFDefinitionError naming ``label`` unless ``cls(*args, **kwargs)`` binds to its constructor: each worker
    builds the class so, and a call that cannot bind would fail every task of a job."""
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as exc:
        given = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
        remedy = (f"give __init__'s parameters defaults, or (a UDF) register it built with its arguments, as "
                  f"{cls.__name__}(...)") if not args and not kwargs else "pass the arguments its __init__ takes"
        raise UDFDefinitionError(f"{label}: each worker builds the stateful class {cls.__name__}({given}), but "
                                 f"that fails: {exc}; {remedy}") from None
    except ValueError:
        pass  # no signature to check (a class built in C): the first call reports a failure


def dumps_by_value(obj: Any) -> bytes:
    """Pickles ``obj`` with its defining module by value, so executors need not import it."""
    # A user function travels with its function's module: the module of interest is the function's.
    target = obj.func if dataclasses.is_dataclass(obj) and hasattr(obj, "func") else obj
    module_name: str = getattr(target, "__module__", None) or ""
    module = sys.modules.get(module_name) if module_name else None
    registered = False
    if (
        module is not None
        and module_name != "__main__"
        and not module_name.startswith("geneva_provider")
        and module_name not in getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", set())
    ):
        cloudpickle.register_pickle_by_value(module)
        registered = True
    try:
        return cloudpickle.dumps(obj)
    finally:
        if registered:
            cloudpickle.unregister_pickle_by_value(module)


@dataclass(frozen=True)
class Options:
    """What every decorator takes besides the function, checked once at decoration."""

    name: str
    label: str
    version: str | None
    on_error: ErrorPolicy
    resources: UDFResources | None


def options(f: Any, noun: str, *, name: Any, version: Any, on_error: Any, num_cpus: Any, num_gpus: Any,
            memory: Any, default: str) -> Options:
    """The decorator's shared arguments, checked: UDFDefinitionError naming the function and the argument.

    The function is named ``name`` when that is a usable name, else by its ``__name__`` (``default``
    without one), so that even a bad ``name=`` is reported naming the function it was given to.
    """
    fn_name = name if isinstance(name, str) and name.strip() else str(getattr(f, "__name__", None) or default)
    label = f"{noun} '{fn_name}'"
    check_name(name, "name", label)
    check_name(version, "version", label)
    policy = error_policy(on_error, label)
    resources = udf_resources(fn_name, num_cpus=num_cpus, num_gpus=num_gpus, memory=memory, label=label)
    return Options(name=fn_name, label=label, version=version, on_error=policy, resources=resources)


def check_manifest(manifest: Any, label: str) -> Any:
    """``manifest=`` of ``@udf`` / ``@chunker`` / ``@udtf``: None or a GenevaManifest (UDFDefinitionError naming the
    function otherwise).  It is pickled with the function, so every job computing it ships the manifest."""
    from geneva_provider.core.manifest import GenevaManifest

    if manifest is not None and not isinstance(manifest, GenevaManifest):
        raise UDFDefinitionError(f"{label}: manifest must be a GenevaManifest (e.g. GenevaManifest.create_pip(name)"
                                 f".pip([...]).build()), got {manifest!r}")
    return manifest


def check_name(value: Any, arg: str, label: str) -> None:
    """UDFDefinitionError unless ``value`` (an optional ``name=``, ``version=``...) is a non-empty string."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise UDFDefinitionError(f"{label}: {arg} must be a non-empty string, got {value!r}")
