"""The tables of a database, through the Lance namespace API (core).

By default a database is a directory (or object-store prefix) of ``<name>.lance`` tables, served
by ``lance.namespace.DirectoryNamespace`` in pure directory mode: tables written by anything else
(older versions of this package, plain ``lance.write_dataset``, Spark) are listed, opened and
dropped like the ones created here.  Another implementation (``"rest"``, or a plug-in class path
per the ``lance_namespace`` spec) can be named with its properties.  Storage options reach the
namespace as ``storage.*`` properties *and* every dataset call, so listing an object store never
falls back to ambient credentials.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from geneva_provider.core.errors import InvalidArgumentError, TableExistsError, TableNotFoundError
from geneva_provider.core.filters import lance_reason
from geneva_provider.core.refs import TableRef
from geneva_provider.core.storage_errors import check_endpoints, reaching

if TYPE_CHECKING:
    from geneva_provider.core.lib_types import Namespace

DIRECTORY = "dir"

# How a stage finds a table it only knows by name, e.g. a view's source: (database URI, name) -> reference.
TableResolver = Callable[[str, str], TableRef]
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def check_table_name(name: Any) -> str:
    """A table name usable as a file name and a namespace id, or InvalidArgumentError naming it."""
    if not isinstance(name, str) or not _TABLE_NAME.match(name) or name.endswith(".lance"):
        raise InvalidArgumentError(f"invalid table name {name!r}: use letters, digits, '_', '-' and '.'")
    return name


class Catalog:
    """Lists, creates, resolves and drops the tables of one database."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None, *, impl: str = DIRECTORY,
                 properties: dict[str, str] | None = None, parent: Sequence[str] = (),
                 client: Namespace | None = None) -> None:
        self.uri = absolute_uri(uri) if impl == DIRECTORY else uri
        self.storage_options = {str(k): str(v) for k, v in storage_options.items()} if storage_options else None
        check_endpoints(self.storage_options, f"database {self.uri}")
        self.impl = impl
        self._properties = dict(properties or {})
        self.parent = tuple(parent)  # the namespace the tables are in (empty: the root); a table's id ends its path
        self._ns: Namespace | None = client
        self._nested: Namespace | None = None  # the directory namespace with its manifest (child namespaces)

    def __repr__(self) -> str:  # storage options and properties may hold secrets: never shown
        within = f", parent={list(self.parent)!r}" if self.parent else ""
        return f"Catalog(uri={self.uri!r}, impl={self.impl!r}{within})"

    def child(self, namespace_id: Sequence[str], client: Namespace | None = None) -> Catalog:
        """The tables of child namespace ``namespace_id`` (``["lake"]``: table ``docs`` is ``["lake", "docs"]``),
        through ``client`` -- a namespace that has child namespaces, e.g. Lance's directory namespace with its
        manifest -- or :attr:`nested`; this catalog for an empty id.  Its tables are found by the namespace alone
        (their locations are the namespace's, not ``<root>/<name>.lance``)."""
        if not namespace_id:
            return self
        return Catalog(self.uri, self.storage_options, impl=self.impl, properties=self._properties,
                       parent=(*self.parent, *namespace_id), client=client or self.nested)

    def of_table(self, table_id: Sequence[str], client: Namespace | None = None) -> Catalog:
        """The catalog holding table ``table_id`` -- a request's ``id``: the namespace path, then the table's name
        (``["lake", "docs"]``) -- below this one: this catalog for a name alone, else :meth:`child`'s."""
        return self.child(list(table_id)[:-1], client)

    @property
    def nested(self) -> Namespace:
        """The namespace serving this database's child namespaces: for a directory database, Lance's directory
        namespace over the same root with its manifest (where child namespaces and their tables are recorded, as
        a ``GenevaNamespace``'s default inner namespace records them); another implementation's own client."""
        if self.impl != DIRECTORY or self.parent:
            return self.namespace
        if self._nested is None:
            self._nested = self._connect({"root": self.uri, **self._given_properties()})
        return self._nested

    def _given_properties(self) -> dict[str, str]:
        """The storage options as namespace properties (``storage.<key>``), then the properties given."""
        return {**{f"storage.{k}": v for k, v in (self.storage_options or {}).items()},
                **{k: str(v) for k, v in self._properties.items()}}

    def _id(self, name: str) -> list[str]:
        """The namespace id of table ``name`` (its name checked)."""
        return [*self.parent, check_table_name(name)]

    @property
    def where(self) -> str:
        """The database and, for a child namespace, the namespace, for messages."""
        return f"{self.uri} (namespace {'.'.join(self.parent)})" if self.parent else self.uri

    @property
    def namespace(self) -> Namespace:
        """The ``lance_namespace`` client (built on first use: importing it costs about a second)."""
        if self._ns is None:
            props: dict[str, str] = {}
            if self.impl == DIRECTORY:
                # Pure directory mode: no __manifest, so every <name>.lance is a table whoever wrote it.
                props = {"root": self.uri, "manifest_enabled": "false", "dir_listing_enabled": "true"}
            self._ns = self._connect({**props, **self._given_properties()})
        return self._ns

    def _connect(self, props: dict[str, str]) -> Namespace:
        """``lance_namespace.connect`` of this catalog's implementation; InvalidArgumentError if it fails."""
        import lance_namespace

        try:
            return lance_namespace.connect(self.impl, props)
        except Exception as exc:  # noqa: BLE001 - any construction failure is a configuration error
            raise InvalidArgumentError(f"cannot open the Lance namespace {self.impl!r} at {self.uri}: "
                                       f"{lance_reason(exc)}") from None

    def names(self) -> list[str]:
        """Names of the tables, sorted."""
        from lance_namespace import ListTablesRequest

        out: list[str] = []
        token = None
        while True:
            with reaching(f"database {self.uri}", self.storage_options):
                page = self.namespace.list_tables(ListTablesRequest(id=list(self.parent), page_token=token))
            out.extend(page.tables)
            token = page.page_token
            if not token:
                return sorted(out)

    def exists(self, name: str) -> bool:
        from lance_namespace import TableExistsRequest
        from lance_namespace.errors import TableNotFoundError as NamespaceTableNotFound

        try:
            with reaching(f"table '{name}' in {self.where}", self.storage_options):
                self.namespace.table_exists(TableExistsRequest(id=self._id(name)))
        except NamespaceTableNotFound:
            return False
        return True

    def ref(self, name: str) -> TableRef:
        """The reference to an existing table; TableNotFoundError naming it otherwise.

        A directory database on a local disk resolves the name itself -- ``<root>/<name>.lance``,
        as the directory namespace does -- because importing ``lance_namespace`` costs ~0.7 s,
        which every Airflow task that only opens a table would pay.
        """
        if self.impl == DIRECTORY and "://" not in self.uri and not self.parent:
            location = f"{self.uri}/{check_table_name(name)}.lance"
            if not os.path.isdir(os.path.join(location, "_versions")):
                raise TableNotFoundError(f"table '{name}' not found in {self.uri}")
            return TableRef(name, location, self.storage_options)
        from lance_namespace import DescribeTableRequest
        from lance_namespace.errors import TableNotFoundError as NamespaceTableNotFound

        try:
            with reaching(f"table '{name}' in {self.where}", self.storage_options):
                found = self.namespace.describe_table(DescribeTableRequest(id=self._id(name))).location
        except NamespaceTableNotFound:
            raise TableNotFoundError(f"table '{name}' not found in {self.where}{self._missing_namespace()}") from None
        if found is None:  # the response's location is optional: a table without one cannot be opened
            raise TableNotFoundError(f"table '{name}' in {self.where} has no location")
        return TableRef(name, found, self.storage_options)

    def _missing_namespace(self) -> str:
        """``": namespace lake does not exist"`` when this catalog's namespace is not one (else "")."""
        if not self.parent:
            return ""
        from lance_namespace import NamespaceExistsRequest
        from lance_namespace.errors import NamespaceNotFoundError

        try:
            with reaching(f"namespace {'.'.join(self.parent)} of {self.uri}", self.storage_options):
                self.namespace.namespace_exists(NamespaceExistsRequest(id=list(self.parent)))
        except NamespaceNotFoundError:
            return f": namespace {'.'.join(self.parent)} does not exist"
        return ""

    def location(self, name: str) -> str | None:
        """Where table ``name`` is, or -- not created yet -- where a directory database will put it
        (``<root>/<name>.lance``); None for a table another namespace has not placed yet."""
        if self.exists(name):
            return self.ref(name).uri
        if self.impl == DIRECTORY and not self.parent:
            return f"{self.uri.rstrip('/')}/{check_table_name(name)}.lance"
        return None

    def create(self, name: str, data: Any, *, mode: str = "create", **write_options: Any) -> TableRef:
        """Writes ``data`` as table ``name`` (``mode``: "create" or "overwrite")."""
        import lance
        from lance_namespace import DropTableRequest

        if mode not in ("create", "overwrite"):
            raise InvalidArgumentError(f"mode must be 'create' or 'overwrite', got {mode!r}")
        exists = self.exists(name)
        if mode == "create" and exists:
            raise TableExistsError(f"table '{name}' already exists in {self.where}; use mode='overwrite' to replace it "
                                   "or mode='exist_ok' to open it")
        mode = mode if exists else "create"  # the namespace overwrites only existing tables
        try:
            with reaching(f"table '{name}' in {self.where}", self.storage_options):
                lance.write_dataset(data, namespace_client=self.namespace, table_id=self._id(name), mode=mode,
                                    storage_options=self.storage_options, **write_options)
        except BaseException:
            if not exists:  # a failed create leaves a reserved, unreadable table behind
                self.namespace.drop_table(DropTableRequest(id=self._id(name)))
            raise
        return self.ref(name)

    def resolve(self, db_uri: str, name: str) -> TableRef:
        """A :data:`TableResolver`: tables of this database here, others in a directory database at ``db_uri``."""
        same = db_uri == self.uri or (self.impl == DIRECTORY and absolute_uri(db_uri) == self.uri)
        return (self if same else Catalog(db_uri, self.storage_options)).ref(name)

    def drop(self, name: str) -> None:
        """Deletes the table (its data, versions and checkpoints)."""
        from lance_namespace import DropTableRequest

        if not self.exists(name):
            raise TableNotFoundError(f"table '{name}' not found in {self.where}")
        with reaching(f"table '{name}' in {self.where}", self.storage_options):
            self.namespace.drop_table(DropTableRequest(id=self._id(name)))


def absolute_uri(uri: str) -> str:
    """An object-store URI as given (without a trailing '/'), or an absolute local path."""
    if "://" in uri and not uri.startswith("file://"):
        return uri.rstrip("/")
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    return os.path.abspath(os.path.expanduser(path))
