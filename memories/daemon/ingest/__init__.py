"""Notes coming in: which files are notes, the ingest job, and the watched folders (their watchers, scans and jobs).
It imports :mod:`memories.daemon.core` and :mod:`memories.daemon.index`, never ``search`` or ``grants``."""
