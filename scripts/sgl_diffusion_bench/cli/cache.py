"""cleanup_model_cache: isolated per-run model caches (prepare), a disk preflight, cleanup with an independent
re-scan and a JSONL ledger, and verify to re-check that ledger later."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from .. import contract, model_cache, selftest
from . import _runner

TOOL = "cleanup_model_cache"
EPILOG = """examples:
  python3 scripts/cleanup_model_cache.py prepare --root /data/bench-cache --model black-forest-labs/FLUX.1-dev \\
      --label baseline --seed-cache ~/.cache/huggingface --preflight --json
  python3 scripts/cleanup_model_cache.py cleanup --root /data/bench-cache \\
      --child black-forest-labs_FLUX.1-dev-baseline \\
      --reason success --ledger outputs/cleanup.jsonl --json
  python3 scripts/cleanup_model_cache.py verify --ledger outputs/cleanup.jsonl --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    sub = parser.add_subparsers(dest="command", parser_class=_runner.Parser)
    parent = _runner.json_flag_parent()
    p = _runner.add_command(sub, "prepare", parents=[parent],
                            help="create <root>/<model>-<label> and print its environment")
    p.add_argument("--root", required=True, help="cache root (created with an ownership marker)")
    p.add_argument("--model", required=True, help="model id, e.g. black-forest-labs/FLUX.1-dev")
    p.add_argument("--label", default="baseline", help="names the child: <root>/<model>-<label>")
    p.add_argument("--seed-cache", action="append", default=[], help="read-only HF home or hub dir (repeatable)")
    p.add_argument("--preflight", action="store_true", help="refuse (exit 3) when the model would not fit")
    p.add_argument("--revision", default=None, help="revision for --preflight (default main)")
    p = _runner.add_command(sub, "preflight", parents=[parent], help="will the model fit on the cache disk")
    p.add_argument("--model", required=True, help="model id, e.g. black-forest-labs/FLUX.1-dev")
    p.add_argument("--revision", default=None, help="revision to size (default main)")
    p.add_argument("--cache-dir", required=True, help="where the download would land (the cache root)")
    p.add_argument("--seed-cache", action="append", default=[],
                   help="read-only HF home or hub dir whose files need no download (repeatable)")
    p.add_argument("--headroom-bytes", type=_runner.bounded_int(0, 1 << 62), default=model_cache.DEFAULT_HEADROOM_BYTES,
                   help="free space to keep on the cache disk after the download")
    p.add_argument("--hub-timeout-s", type=_runner.bounded_float(0, 3600, low_open=True),
                   default=model_cache.DEFAULT_HUB_TIMEOUT_S, help="how long to wait for the Hub's file listing")
    p = _runner.add_command(sub, "cleanup", parents=[parent],
                            help="delete one generated child, re-scan, append to the ledger")
    p.add_argument("--root", required=True, help="the cache root prepare created (it carries our marker)")
    p.add_argument("--child", required=True, help="child name (or path directly under --root)")
    p.add_argument("--reason", choices=model_cache.EXIT_REASONS, default="success",
                   help="why the run that used the child ended (recorded in the ledger)")
    p.add_argument("--ledger", help="JSONL ledger to append to (required unless --dry-run)")
    p.add_argument("--model", help="override the model recorded in the child's manifest")
    p.add_argument("--label", help="override the label recorded in the child's manifest")
    p.add_argument("--dry-run", action="store_true", help="print the plan; delete nothing, write no ledger line")
    p = _runner.add_command(sub, "verify", parents=[parent],
                            help="re-check that every ledger entry's cache dir is gone")
    p.add_argument("--ledger", required=True, help="the JSONL ledger cleanup appended to")
    return parser


def handle(args: argparse.Namespace, remove: model_cache.Remover = model_cache.remove_entry) -> _runner.Result:
    """Dispatch a subcommand; ``remove`` is the per-entry deletion a caller may wrap (tests inject a faulty one)."""
    if args.command is None:
        raise contract.UsageError("usage.no_command", "no subcommand given", f"run '{TOOL} --help'")
    if args.command == "cleanup":
        return _cleanup(args, remove)
    return {"prepare": _prepare, "preflight": _preflight, "verify": _verify}[args.command](args)


def _prepare(args: argparse.Namespace) -> _runner.Result:
    preflight = None
    if args.preflight:
        target = Path(args.root).expanduser()
        preflight = model_cache.disk_preflight(args.model, args.revision, target, args.seed_cache)
    prepared = model_cache.prepare_child_cache(args.root, args.model, args.label, args.seed_cache)
    doc = contract.envelope(
        "cache-prepare.v1", TOOL, root=str(prepared.root), root_created=prepared.root_created,
        child=str(prepared.child), model=args.model, label=args.label, manifest_path=str(prepared.manifest_path),
        env=prepared.env, seed_caches=[s.as_dict() for s in prepared.seeds], preflight=preflight)
    text = "\n".join([f"prepared {prepared.child}"] + [f"export {k}={v}" for k, v in prepared.env.items()])
    return _runner.Result(doc, text)


def _preflight(args: argparse.Namespace) -> _runner.Result:
    result = model_cache.disk_preflight(args.model, args.revision, args.cache_dir, args.seed_cache,
                                        headroom_bytes=args.headroom_bytes, hub_timeout_s=args.hub_timeout_s)
    doc = contract.envelope("cache-preflight.v1", TOOL, preflight=result)
    notes = "".join(f"\n  {n}" for n in result["notes"])
    return _runner.Result(doc, f"{args.model}: {result['outcome']} (to download: {result['to_download_bytes']} "
                               f"bytes, free: {result['free_bytes']} bytes){notes}")


def _cleanup(args: argparse.Namespace, remove: model_cache.Remover) -> _runner.Result:
    if args.dry_run:
        plan = model_cache.plan_cleanup(args.root, args.child)
        doc = contract.envelope("cache-cleanup.v1", TOOL, dry_run=True, root=str(plan.root), child=str(plan.child),
                                ledger=args.ledger, plan=plan.as_dict(), entry=None)
        return _runner.Result(doc, f"would remove {plan.child}: {plan.before['file_count']} files, "
                                   f"{plan.before['weight_file_count']} weight files, "
                                   f"{plan.before['total_bytes']} bytes")
    if not args.ledger:
        raise contract.UsageError("usage.ledger_required", "cleanup needs --ledger FILE (or --dry-run)",
                                  "pass --ledger outputs/cleanup.jsonl")
    entry = model_cache.cleanup_child_cache(args.root, args.child, args.reason, args.ledger, args.model, args.label,
                                             remove=remove)
    doc = contract.envelope("cache-cleanup.v1", TOOL, ok=entry["ok"], dry_run=False, root=entry["root"],
                            child=entry["cache_dir"], ledger=str(Path(args.ledger).resolve()), entry=entry,
                            plan={"entry_count": entry["deletion"]["planned_entry_count"] - 1,
                                  "before": entry["before"], "hf_scan": entry["hf_scan_before"],
                                  "outside_link_count": entry["residual"]["outside_targets_checked"]})
    return _runner.Result(doc, render_entry(entry, args.ledger))


def render_entry(entry: dict, ledger: str) -> str:
    before, residual = entry["before"], entry["residual"]
    lines = [f"cleaned {entry['cache_dir']}: {before['total_bytes']} bytes, {before['weight_file_count']} weight files "
             f"owned ({before['linked_outside_weight_count']} linked from seeds); ledger={ledger}",
             f"re-scan: child present={residual['child_present']}, former entries present="
             f"{residual['former_entries_present']}/{residual['former_entries_checked']}, outside targets changed="
             f"{len(residual['outside_targets_changed'])}"]
    lines += [f"  left behind: {p}" for p in residual["present_paths"]]
    lines += [f"  failed: {f['path']}: {f['error']}" for f in entry["deletion"]["failures"]]
    lines += [f"  seed {s['hub']} CHANGED" for s in entry["seed_caches"] if not s["unchanged"]]
    lines.append("clean" if entry["ok"] else "NOT CLEAN: see residual/deletion/seed_caches; nothing outside the child "
                                             "was deleted")
    return "\n".join(lines)


def _verify(args: argparse.Namespace) -> _runner.Result:
    result = model_cache.verify_ledger(args.ledger)
    doc = contract.envelope("cache-verify.v1", TOOL, ok=result["residue_count"] == 0,
                            ledger=str(Path(args.ledger).resolve()), **result)
    lines = [f"line {e['line']}: {e['cache_dir']} {e['status']} (recorded ok={e['recorded_ok']})"
             for e in result["entries"]]
    return _runner.Result(doc, "\n".join(lines + [f"{result['residue_count']} with residue"]))


def _build_seed(hub: Path) -> None:
    """A two-file HF-cache-shaped repo: a safetensors blob behind a snapshot link, and a config."""
    repo = hub / "models--org--tiny"
    snap = repo / "snapshots" / ("a" * 40)
    for d in (repo / "blobs", repo / "refs", snap):
        d.mkdir(parents=True)
    (repo / "blobs" / "w1").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}" + b"\0" * 64)
    (repo / "blobs" / "c1").write_text('{"model": "tiny"}')
    (repo / "refs" / "main").write_text("a" * 40)
    os.symlink("../../blobs/w1", snap / "model.safetensors")
    os.symlink("../../blobs/c1", snap / "config.json")


def self_tests() -> list[selftest.Check]:
    def round_trip() -> str:
        with tempfile.TemporaryDirectory() as tmp:
            seed = Path(tmp) / "seed" / "hub"
            _build_seed(seed)
            seed_hash = model_cache.fingerprint_tree(seed, content=True)
            prepared = model_cache.prepare_child_cache(Path(tmp) / "root", "org/tiny", "selftest", [seed])
            new_blob = Path(prepared.env["HF_HUB_CACHE"]) / "models--org--tiny" / "blobs" / "w2"
            new_blob.write_bytes(b"GGUF" + b"\0" * 32)
            entry = model_cache.cleanup_child_cache(prepared.root, prepared.child, "success", Path(tmp) / "l.jsonl")
            if not entry["ok"] or entry["before"]["weight_file_count"] != 1 or os.path.lexists(prepared.child):
                raise AssertionError(json.dumps(entry["before"]))
            if model_cache.fingerprint_tree(seed, content=True) != seed_hash:
                raise AssertionError("seed cache changed")
            verified = model_cache.verify_ledger(Path(tmp) / "l.jsonl")
            if verified["residue_count"]:
                raise AssertionError("verify found residue")
            return "prepare (seeded) -> new blob -> cleanup -> verify: clean, seed bytes unchanged"

    def hostile_link() -> str:
        with tempfile.TemporaryDirectory() as tmp:
            outside = Path(tmp) / "outside"
            outside.mkdir()
            (outside / "keep.bin").write_bytes(b"x")
            prepared = model_cache.prepare_child_cache(Path(tmp) / "root", "m", "l")
            os.symlink(outside, prepared.child / "escape")
            entry = model_cache.cleanup_child_cache(prepared.root, prepared.child, "error", Path(tmp) / "l.jsonl")
            if not (outside / "keep.bin").is_file() or not entry["ok"]:
                raise AssertionError("a link out of the child was followed")
            return "a symlink to a directory outside the child is unlinked, its target kept"

    def preflight_offline() -> str:
        with tempfile.TemporaryDirectory() as tmp:
            seed = Path(tmp) / "hub"
            _build_seed(seed)
            result = model_cache.disk_preflight("org/tiny", None, tmp, [seed], environ={"HF_HUB_OFFLINE": "1"})
            if result["outcome"] != "fits" or result["size_source"] != "seed_snapshot":
                raise AssertionError(str(result))
            return f"offline preflight sizes org/tiny from the seed snapshot ({result['required_bytes']} bytes)"

    return [*selftest.schema_checks(["cache-prepare.v1", "cache-preflight.v1", "cache-cleanup.v1",
                                     "cache-verify.v1", "cleanup-ledger.v1"]),
            selftest.Check("round-trip", round_trip), selftest.Check("hostile-link", hostile_link),
            selftest.Check("preflight-offline", preflight_offline)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
