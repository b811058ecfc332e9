"""Command-line entry points: one module per script, each a ``main(argv=None) -> int``.

Every entry point (``scripts/*.py`` and the wheel's console scripts) imports this package before any module that needs
a third-party package, so the interpreter is checked here first (standard library only): one that lacks the bundle's
dependencies gets an ``env.missing_dependency`` error naming the command that works, never a traceback.
"""

from ..engine import entry_guard

entry_guard.exit_unless_dependencies_present()
