"""The reference's ``geneva.manifest`` module path: ``from geneva_provider.manifest import GenevaManifest``."""

from geneva_provider.core.manifest import GenevaManifest, SparkCluster
from geneva_provider.core.manifest_builder import PipManifestBuilder, SiteManifestBuilder

__all__ = ["GenevaManifest", "PipManifestBuilder", "SiteManifestBuilder", "SparkCluster"]
