"""The reference's ``geneva.query`` module path: ``from geneva_provider.query import GenevaQueryBuilder``."""

from geneva_provider.core.query_builder import GenevaQueryBuilder

__all__ = ["GenevaQueryBuilder"]
