"""The package version (one place: the package, its artifacts and its tuning records name it)."""

__version__ = "0.1.0"
