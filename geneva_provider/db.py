"""The reference's ``geneva.db`` module path: ``from geneva_provider.db import Connection, connect``."""

from geneva_provider.facade.connection import Connection, connect

__all__ = ["Connection", "connect"]
