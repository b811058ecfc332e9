"""What a run's evidence proves: the engine's log (markers, gates, effective settings), its perf dump, its outputs
(media, byte identity, quality), the host around it, and the verdict on one request (``judging/`` because
``evidence/`` is the PR evidence folder)."""
