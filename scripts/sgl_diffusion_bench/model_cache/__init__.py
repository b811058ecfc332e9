"""Isolated model caches for benchmark runs: layout and names, a copy-on-write overlay of read-only seed caches
(prepare), who holds a child and when it may be taken back (ownership), a cleanup that cannot leave the child and
proves itself by an independent re-scan (cleanup) into an append-only ledger (ledger), a later re-check of that ledger
(verify), the end of a run's child and the removal of what a killed run left (reclaim), and a disk-space check before
a download (preflight).

The public names stay importable from ``sgl_diffusion_bench.model_cache``.
"""

from .cleanup import (EXIT_REASONS, RESIDUAL_SAMPLE_LIMIT, CleanupPlan, Remover, cleanup_child_cache, execute_cleanup,
                      plan_cleanup, remove_entry, rescan_residual)
from .ledger import check_ledger
from .layout import (MANIFEST_NAME, MARKER_NAME, MARKER_TEXT, cache_environment, child_name, protected_paths,
                     resolve_root, resolve_seed_hub, safe_name)
from .preflight import DEFAULT_HEADROOM_BYTES, DEFAULT_HUB_TIMEOUT_S, disk_preflight
from .prepare import COPIED_REPO_SUBDIRS, PreparedCache, SeedOverlay, overlay_seed, prepare_child_cache
from .ownership import LOCK_NAME, RUN_LAYOUT, RunLock
from .reclaim import Reclaim, finish_run_child, reclaim_for_run, reclaim_stale_children
from .tree import WEIGHT_SUFFIXES, TreeEntry, compute_stats, fingerprint_tree, hf_scan, walk_tree
from .verify import verify_ledger

__all__ = ["COPIED_REPO_SUBDIRS", "DEFAULT_HEADROOM_BYTES", "DEFAULT_HUB_TIMEOUT_S", "EXIT_REASONS", "LOCK_NAME",
           "MANIFEST_NAME", "MARKER_NAME", "MARKER_TEXT", "RESIDUAL_SAMPLE_LIMIT", "RUN_LAYOUT", "WEIGHT_SUFFIXES",
           "CleanupPlan", "PreparedCache", "Reclaim", "Remover", "RunLock", "SeedOverlay", "TreeEntry",
           "cache_environment", "check_ledger", "child_name", "cleanup_child_cache", "compute_stats",
           "disk_preflight", "execute_cleanup", "finish_run_child",
           "fingerprint_tree", "hf_scan", "overlay_seed", "plan_cleanup", "prepare_child_cache",
           "protected_paths", "reclaim_for_run", "reclaim_stale_children", "remove_entry",
           "rescan_residual", "resolve_root", "resolve_seed_hub", "safe_name", "verify_ledger", "walk_tree"]
