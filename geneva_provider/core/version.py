"""The package's version, in a leaf module any layer (and a Spark worker's probe) can import."""

__version__ = "0.1.0"  # keep equal to pyproject.toml's version
