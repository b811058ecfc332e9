"""Command-line entry points: one module per script, each a ``main(argv=None) -> int``."""
