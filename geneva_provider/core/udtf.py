"""The old home of ``UDTF``, kept because stored pickles name it (core; a compatibility alias).

Every chunker or batch-UDTF view written before :mod:`geneva_provider.core.functions` existed holds, in
its schema metadata, a pickle that names ``geneva_provider.core.udtf.UDTF`` and
``geneva_provider.core.udtf.UDTFKind``; unpickling imports this module and takes those names from it, so
they must stay here for as long as such views may be read.  New code imports
:mod:`geneva_provider.core.functions.udtf`.
"""

from geneva_provider.core.functions.udtf import UDTF, UDTFKind

__all__ = ["UDTF", "UDTFKind"]
