"""sweep_diffusion: a sweep spec (sweep-spec.v1, YAML) expanded into shards, one whole campaign of one preset each
(an A/B/B/A pair never spans jobs or nodes); run them here, through Slurm (submitit, one job array) or on a Ray
cluster; see each shard's state; merge the results into one report with a latency-vs-memory plot per arm.
Running again on the same folder skips finished shards (same hash, intact result) and retries failed ones."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from .. import contract, progress, selftest
from ..sweep import driver, executors, merge, merge_render, watch
from ..sweep import plan as sweep_plan
from ..sweep import spec as sweep_spec
from . import _runner, bench

TOOL = "sweep_diffusion"
EPILOG = """examples:
  python3 scripts/sweep_diffusion.py plan SPEC --folder SWEEP --json
  python3 scripts/sweep_diffusion.py run SPEC --folder SWEEP --json
  python3 scripts/sweep_diffusion.py run SPEC --folder /shared/SWEEP --executor slurm --partition gpu --json
  python3 scripts/sweep_diffusion.py run SPEC --folder SWEEP --executor ray --ray-address 10.0.0.1:6379 --json
  python3 scripts/sweep_diffusion.py status --folder SWEEP --json
  python3 scripts/sweep_diffusion.py cancel --folder SWEEP --shard flux-o1-r1 --json
  python3 scripts/sweep_diffusion.py merge --folder SWEEP --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    sub = parser.add_subparsers(dest="command", parser_class=_runner.Parser)
    parent = _runner.json_flag_parent()
    p = _runner.add_command(sub, "plan", parents=[parent], help="the shards of a spec: commands, GPUs, estimated cost")
    p.add_argument("spec", help="the sweep spec (YAML, sweep-spec.v1)")
    p.add_argument("--folder", default="sweep", help="the sweep folder the commands write to (default ./sweep)")
    _executor_arguments(p, "where `run` would put the shards, to mark each runnable there or not: ")
    p = _runner.add_command(sub, "run", parents=[parent],
                            help="run the shards not finished yet (skips done, retries failed)")
    p.add_argument("spec", help="the sweep spec (YAML, sweep-spec.v1)")
    p.add_argument("--folder", required=True, help="the sweep folder (a shared file system for Slurm)")
    _executor_arguments(p, "")
    p.add_argument("--parallel", type=_runner.bounded_int(1, 1024), default=1,
                   help="local: shards at once on this host (GPU shards take distinct GPUs through leases; "
                        "default 1)")
    p.add_argument("--no-wait", action="store_true", help="slurm: return once the job array is submitted")
    p.add_argument("--partition", help="slurm: the partition (sbatch --partition)")
    p.add_argument("--account", help="slurm: the account (sbatch --account)")
    p.add_argument("--qos", help="slurm: the QoS (sbatch --qos)")
    p.add_argument("--sbatch", action="append", default=[], metavar="KEY=VALUE",
                   help="slurm: another sbatch option, e.g. --sbatch constraint=h200 (repeatable)")
    p.add_argument("--cpus-per-task", type=_runner.bounded_int(1, 1024), default=1,
                   help="slurm: CPUs per shard (default 1)")
    p.add_argument("--max-parallel", type=_runner.bounded_int(1, 100000),
                   help="slurm: at most this many shards at once (the job array's throttle)")
    for name, text in (("status", "done / running / failed / pending per shard, from the sweep folder"),
                       ("merge", "one sweep-report.v1, its Markdown and a Pareto plot per arm")):
        p = _runner.add_command(sub, name, parents=[parent], help=text)
        p.add_argument("--folder", required=True, help="the sweep folder")
        if name == "merge":
            p.add_argument("--engine-dir", help="the sglang package directory whose nightly perf baselines each "
                                                "shard is compared with (default: the installed engine's)")
    p = _runner.add_command(sub, "cancel", parents=[parent], help="stop running or queued shards (scancel, Ray cancel)")
    p.add_argument("--folder", required=True, help="the sweep folder")
    p.add_argument("--shard", action="append", required=True, help="a shard id (repeatable)")
    return parser


def _executor_arguments(p: argparse.ArgumentParser, lead: str) -> None:
    p.add_argument("--executor", choices=executors.EXECUTORS, default="local",
                   help=lead + "local (default: one shard after another on this host), slurm (submitit job array) "
                   "or ray (tasks on a running cluster)")
    p.add_argument("--ray-address", help="ray: the cluster's address (default: $RAY_ADDRESS, else 'auto')")


def _status_text(doc: dict) -> str:
    lines = [f"{r['id']}: {r['status']}" + (f" ({r['reason']})" if r["reason"] else "") for r in doc["shards"]]
    return "\n".join(lines + [", ".join(f"{n} {s}" for s, n in doc["counts"].items())])


def _status_result(doc: dict, schema: str = "sweep-status.v1") -> _runner.Result:
    ok = doc["counts"]["done"] == len(doc["shards"])
    return _runner.Result(contract.envelope(schema, TOOL, ok=ok, **doc), _status_text(doc))


def _check_with_the_bench(rows: list[dict]) -> int:
    """Each shard's command through the bench's own checks (once per preset and override set: repeats differ only
    in their label), recorded on its row as bench_refusal; returns how many shards are refused."""
    progress.say(f"checking {len(rows)} shard command(s) with the bench's own argument checks", source="sweep")
    verdicts: dict[str, dict | None] = {}
    for row in rows:
        key = json.dumps([row["preset"], row["overrides"]], sort_keys=True)
        if key not in verdicts:
            verdicts[key] = bench.refusal_of(row["argv"][row["argv"].index(sweep_plan.BENCH_MODULE) + 1:])
        row["bench_refusal"] = verdicts[key]
    return sum(r["bench_refusal"] is not None for r in rows)


def _run_summary(doc: dict, elapsed_s: float) -> str:
    counts, folder = doc["counts"], shlex.quote(doc["folder"])
    ran = f"{len(doc['run']['submitted'])} shard(s) run, {len(doc['run']['skipped'])} skipped"
    tally = ", ".join(f"{n} {s}" for s, n in counts.items())
    if counts["failed"]:
        after = f"see why with `sweep_diffusion.py status --folder {folder}`; `run` again retries the failed ones"
    elif counts["done"] == len(doc["shards"]):
        after = f"next: `sweep_diffusion.py merge --folder {folder}` writes the report"
    else:
        after = f"follow it with `sweep_diffusion.py status --folder {folder}`"
    return f"{doc['name']}: {ran} in {watch.clock_text(elapsed_s)}; now {tally}; {after}"


def _plan_text(doc: dict, refused: int, blocked: int) -> str:
    lines = []
    for r in doc["shards"]:
        lines += [f"{r['id']}: {r['gpus']} GPU(s), ~{r['estimate']['minutes']} min ({r['estimate']['source']})",
                  f"  {r['command']}"]
        if r["bench_refusal"]:
            lines.append(f"  refused by the bench: [{r['bench_refusal']['code']}] {r['bench_refusal']['message']}")
        if not r["runnable"]:
            lines.append(f"  not runnable with --executor {doc['where']['executor']}: {r['not_runnable_reason']}")
    if doc["where"]["hint"]:
        lines.append(f"hint: {doc['where']['hint']}")
    lines.append(f"{len(doc['shards'])} shard(s), {doc['totals']['minutes']} min estimated; {refused} refused by "
                 f"the bench's own checks, {blocked} not runnable with --executor {doc['where']['executor']}"
                 + ("" if refused or blocked else ": `run` would start them all"))
    return "\n".join(lines)


def handle(args: argparse.Namespace) -> _runner.Result:
    if args.command is None:
        raise contract.UsageError("usage.no_command", "no subcommand given", f"run '{TOOL} --help'")
    folder = Path(args.folder).expanduser().resolve()
    if args.command == "plan":
        doc = driver.plan(args.spec, folder, args.executor, executors.Options(ray_address=args.ray_address))
        refused = _check_with_the_bench(doc["shards"])
        blocked = sum(not r["runnable"] for r in doc["shards"])
        return _runner.Result(contract.envelope("sweep-plan.v1", TOOL, ok=not refused and not blocked, **doc),
                              _plan_text(doc, refused, blocked))
    if args.command == "run":
        options = executors.Options(wait=not args.no_wait, partition=args.partition, account=args.account,
                                    qos=args.qos, sbatch=tuple(args.sbatch), cpus_per_task=args.cpus_per_task,
                                    max_parallel=args.max_parallel, parallel=args.parallel,
                                    ray_address=args.ray_address)
        started = time.monotonic()
        doc = driver.run(args.spec, folder, args.executor, options)
        result = _status_result(doc)
        if args.no_wait:
            result.exit_code = 0 if not doc["counts"]["failed"] else 1
        result.summary = _run_summary(doc, time.monotonic() - started)
        return result
    if args.command == "status":
        return _status_result(driver.status(folder))
    if args.command == "cancel":
        return _status_result(driver.cancel(folder, args.shard))
    report = merge.merge(folder, args.engine_dir)
    plots, absent = merge_render.plots(report, folder)
    markdown = merge_render.markdown(report, plots, absent)
    markdown_path = _runner.write_output_file(folder / "sweep-report.md", markdown, "--folder")
    report["artifacts"] = {"markdown": markdown_path, "plots": plots, "plots_absent": absent}
    ok = merge.report_ok(report)
    _runner.write_output_file(folder / "sweep-report.json", contract.dumps(
        contract.envelope("sweep-report.v1", TOOL, ok=ok, **report)), "--folder")
    summary = (f"{report['name']}: {len(report['shards'])} shard(s) merged, {len(report['failures'])} not done or not "
               f"valid; Markdown: {markdown_path}")
    return _runner.Result(contract.envelope("sweep-report.v1", TOOL, ok=ok, **report), markdown, summary=summary)


def self_tests() -> list[selftest.Check]:
    def sample_spec() -> str:
        spec = sweep_spec.expand({"schema": "sweep-spec.v1", "presets": {"names": ["tiny-flux-cpu"]},
                                  "overrides": [{"seed": 1}, {"seed": 2}]}, "self-test")
        assert [s.id for s in spec.shards] == ["tiny-flux-cpu-o1-r1", "tiny-flux-cpu-o2-r1"]
        return "2 shards"

    return selftest.schema_checks(["sweep-spec.v1", "sweep-plan.v1", "sweep-status.v1", "sweep-report.v1"]) + \
        [selftest.Check("spec", sample_spec)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
