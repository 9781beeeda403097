"""layertap Python package: prep, data, export."""

__version__ = "0.1.0"
