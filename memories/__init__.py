"""Memories: a local-first, encrypted personal memory vault."""

__version__ = "0.1.0"
