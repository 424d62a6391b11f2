"""The old home of ``UDF``, kept because stored pickles name it (core; a compatibility alias).

Every UDF column written before :mod:`geneva_provider.core.functions` existed holds, in its field
metadata, a pickle that names ``geneva_provider.core.udf.UDF`` and ``geneva_provider.core.udf.UDFKind``;
unpickling imports this module and takes those names from it, so they must stay here for as long as
such tables may be read.  New code imports :mod:`geneva_provider.core.functions.udf`.
"""

from geneva_provider.core.functions.udf import UDF, UDFKind

__all__ = ["UDF", "UDFKind"]
