"""``python -m memories`` is the ``memories`` command."""

from memories.cli import main

main()
