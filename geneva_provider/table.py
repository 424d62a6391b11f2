"""The reference's ``geneva.table`` module path: ``from geneva_provider.table import Table``."""

from geneva_provider.facade.table import Table

__all__ = ["Table"]
