"""Tidehouse runtime: hot storage, Spark bridge, tiering, union read, configuration and the CLI."""

__version__ = "0.1.0"
