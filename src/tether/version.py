"""tether's version (``tether.__version__``; pyproject.toml's version is the same, and a
unit test keeps them together). Here, at the bottom of the layers, so that any module
may name it (an export records which tether wrote it)."""

__version__ = "0.1.0"
