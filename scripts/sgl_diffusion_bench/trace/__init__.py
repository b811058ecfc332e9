"""Chrome traces from torch.profiler: one parse into a compact ``Trace`` table, analyses that take that table.

``load.load_trace(path)`` reads a ``.json``/``.json.gz`` trace once (typed msgspec decoding of only the fields the
analyses need); the modules under ``analyses/`` are pure functions ``analyze_*(trace, ...) -> dict`` on that model.
"""
