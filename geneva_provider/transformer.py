"""The reference's ``geneva.transformer`` module path: the UDF decorator and its types."""

from geneva_provider.core.functions.udf import UDF, Columns, UDFKind, UnpackedUDF, udf

__all__ = ["UDF", "Columns", "UDFKind", "UnpackedUDF", "udf"]
