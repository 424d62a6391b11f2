"""Names for the library types the core and the pipeline pass around, for annotations only (core).

Stages hand each other Lance datasets, fragments, their metadata and Spark sessions, but import
lance and pyspark only inside the functions that use them: Airflow imports the operators (and so
these modules) in every scheduler loop, and the core installs and runs without a Spark cluster.
The names here exist only for the type checker: import them under ``if TYPE_CHECKING:`` in a module
with ``from __future__ import annotations``, so no annotation is evaluated and nothing heavy loads.
Never use them where annotations are evaluated at run time (pydantic fields, dataclass ``ClassVar``).

One place says which class a "dataset", a "fragment" or a "session" is, so a signature reads
``ds: Dataset`` rather than ``ds: Any`` and mypy checks the calls made on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    import numpy as np
    import numpy.typing as npt
    from lance import LanceDataset
    from lance.fragment import DataFile, FragmentMetadata, LanceFragment
    from lance.lance.schema import LanceField
    from lance_namespace import LanceNamespace
    from pyspark import SparkContext
    from pyspark.sql import SparkSession as ClassicSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    Dataset: TypeAlias = LanceDataset
    """A Lance table at one version (``lance.dataset(uri)``, ``TableRef.dataset()``)."""
    Fragment: TypeAlias = LanceFragment
    """One fragment of a dataset (``ds.get_fragments()``): reads its rows."""
    FragmentMeta: TypeAlias = FragmentMetadata
    """What a fragment is made of (``frag.metadata``): its data files, deletion file, physical rows."""
    Field: TypeAlias = LanceField
    """A field of a Lance schema (``ds.lance_schema.field(name)``), with its field id and children."""
    SparkSession: TypeAlias = ClassicSession | ConnectSession
    """A Spark session the stages run on: a classic one (py4j, spark-submit) or a Spark Connect client."""
    Namespace: TypeAlias = LanceNamespace
    """A ``lance_namespace`` client: the catalog of a Lance database's tables."""
    RowAddresses: TypeAlias = npt.NDArray[np.uint64]
    """Row addresses ``(fragment_id << 32) | offset``, one per live row."""
    Positions: TypeAlias = npt.NDArray[np.int64]
    """Positions of rows within a fragment's live rows (the planner's logical offsets)."""
    ArrayLike: TypeAlias = npt.ArrayLike
    """Anything numpy makes an array of (a mask, a list of offsets)."""

    __all__ = ["ArrayLike", "ClassicSession", "ConnectSession", "DataFile", "Dataset", "Field", "Fragment",
               "FragmentMeta", "Namespace", "Positions", "RowAddresses", "SparkContext", "SparkSession"]
