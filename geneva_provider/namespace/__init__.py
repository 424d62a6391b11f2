"""The Lance namespace of this package (``impl="geneva"``): :class:`GenevaNamespace`.

Imported only when used (``lance_namespace.connect("geneva", ...)``): it imports ``lance_namespace``, whose import
takes seconds; ``geneva_provider.namespace_plugin`` registers it without importing anything.
"""

from geneva_provider.namespace.service import GenevaNamespace

__all__ = ["GenevaNamespace"]
