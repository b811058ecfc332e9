"""A PR evidence folder from one request: the steps (readiness, the warm A/B/B/A campaign, output identity, one
profiled request per arm, trace compare and classification, BCG replay, cache cleanup) run as the package's own
functions, recorded in a resumable manifest (``evidence.json``), rendered as ``EVIDENCE.md`` and a plot, and
verifiable by a reviewer from the folder alone.

Modules: ``request`` (the normalised settings and their hash), ``manifest`` (the folder's record, file hashes),
``steps`` and ``profiling`` (what each step runs), ``run`` (order, resume, interruption), ``verify`` (the reviewer's
check), ``render`` and ``plot`` (the Markdown and the picture).
"""
