"""The reference's ``geneva.manifest`` module path: ``from geneva_provider.manifest import GenevaManifest``."""

from geneva_provider.core.manifest import GenevaManifest, PipManifestBuilder, SiteManifestBuilder, SparkCluster

__all__ = ["GenevaManifest", "PipManifestBuilder", "SiteManifestBuilder", "SparkCluster"]
