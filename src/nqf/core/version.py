"""The package version (also read by the CLI and the results store without importing JAX)."""

__version__ = "0.1.0"
