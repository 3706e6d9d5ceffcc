"""The ``tether`` command line: ``tether.cli:main`` is the console script."""

from tether.cli.main import main

__all__ = ["main"]
