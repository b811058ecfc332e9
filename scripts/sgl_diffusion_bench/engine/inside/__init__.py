"""Code that runs inside the engine's own interpreter: the warm driver and the CPU adapter's sitecustomize.

Standard library and the engine's stack only (sglang, torch): never this package, whose dependencies the engine's
interpreter need not have. tests/test_architecture.py checks the imports.
"""
