"""diffusion_skill_env: preflight — repo root, output dirs, idle GPUs and leases, and `inspect`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import contract, selftest, work_dirs
from ..engine import engine_probe, engine_process, engine_python, env, gpu
from . import _engine_args, _runner

TOOL = "diffusion_skill_env"
EPILOG = """examples:
  python3 scripts/diffusion_skill_env.py inspect --json
  export CUDA_VISIBLE_DEVICES=$(python3 scripts/diffusion_skill_env.py print-idle-gpus --count 2)
  python3 scripts/diffusion_skill_env.py lease --count 1 --json -- sglang generate --model-path ...

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    sub = parser.add_subparsers(dest="command", parser_class=_runner.Parser)
    parent = _runner.json_flag_parent()
    p = _runner.add_command(sub, "inspect", parents=[parent],
                            help="one env.v1 document: versions, GPUs, dirs, problems")
    _engine_args.add_engine_options(p)
    p.add_argument("--no-engine-check", action="store_true",
                   help="skip importing the engine's generate entry point in a child process (the engine "
                   "probe's, shared with check_readiness through its cache; 10-40 s when not cached)")
    _runner.add_command(sub, "print-root", parents=[parent], help="the sglang repo root (or the work root without one)")
    p = _runner.add_command(sub, "print-assets-dir", parents=[parent],
                            help="<work root>/inputs/diffusion_benchmark/figs")
    p.add_argument("--mkdir", action="store_true", help="create the directory if it is missing")
    p = _runner.add_command(sub, "print-output-dir", parents=[parent], help="benchmarks or profiles output directory")
    p.add_argument("--kind", required=True, choices=sorted(work_dirs.OUTPUT_SUBDIRS), help="which tools' outputs")
    p.add_argument("--mkdir", action="store_true", help="create the directory if it is missing")
    for name, helptext in (("print-idle-gpus", "comma-separated idle GPU indices, sampled several times"),
                           ("lease", "hold idle GPUs exclusively while COMMAND runs")):
        p = _runner.add_command(sub, name, parents=[parent], help=helptext)
        p.add_argument("--count", type=_runner.bounded_int(1, 1024), default=1, help="how many idle GPUs")
        p.add_argument("--samples", type=_runner.bounded_int(1, 1000), default=3,
                       help="idle in every one of this many NVML readings")
        p.add_argument("--max-memory-mib", type=_runner.bounded_int(0, 1 << 31), default=gpu.IDLE_MAX_MEMORY_MIB,
                       help="most memory in use that still counts as idle (loosen only deliberately)")
        p.add_argument("--max-util-pct", type=_runner.bounded_int(0, 100), default=gpu.IDLE_MAX_UTILIZATION_PCT,
                       help="highest utilisation that still counts as idle (loosen only deliberately)")
        p.add_argument("--lock-dir", help=f"where leases are kept, shared by every campaign (default: "
                       f"${gpu.LOCK_DIR_ENV}, else $XDG_RUNTIME_DIR/sglang-diffusion-gpu-locks, else "
                       "/tmp/sglang-diffusion-gpu-locks-<uid>)")
        if name == "lease":
            p.add_argument("--label", default="manual", help="names the lease holder for others to see")
            p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    _runner.add_command(sub, "check-write-access", parents=[parent], help="write a probe file under the work root")
    return parser


def _path_result(schema_value: str, path) -> _runner.Result:
    return _runner.Result(contract.envelope("env-path.v1", TOOL, kind=schema_value, path=str(path)), str(path))


def handle(args: argparse.Namespace) -> _runner.Result:
    command = args.command
    if command is None:
        raise contract.UsageError("usage.no_command", "no subcommand given", f"run '{TOOL} --help'")
    if command == "inspect":
        doc = env.inspect(engine_python=engine_python.resolve(args.engine_python),
                          import_check=None if args.no_engine_check else engine_probe.import_check)
        return _runner.Result(doc, render_inspect(doc),
                              exit_code=0 if doc["ok"] else int(contract.ExitCode.PRECONDITION))
    if command == "print-root":
        root, _ = work_dirs.repo_root()
        return _path_result("root", root if root is not None else work_dirs.work_root()[0])
    if command == "print-assets-dir":
        return _path_result("assets", work_dirs.assets_dir(args.mkdir))
    if command == "print-output-dir":
        return _path_result(args.kind, work_dirs.output_dir(args.kind, args.mkdir))
    if command == "check-write-access":
        return _path_result("write_probe", work_dirs.check_write_access())
    options = dict(samples=args.samples, max_memory_mib=args.max_memory_mib, max_util_pct=args.max_util_pct,
                   lock_dir=Path(args.lock_dir) if args.lock_dir else gpu.DEFAULT_LOCK_DIR)
    if command == "print-idle-gpus":
        gpus = gpu.pick_idle_gpus(args.count, **options)
        indices = ",".join(str(g.index) for g in gpus)
        doc = contract.envelope("idle-gpus.v1", TOOL, indices=[g.index for g in gpus],
                                uuids=[g.uuid for g in gpus], cuda_visible_devices=indices)
        return _runner.Result(doc, indices)
    return _lease(args, options)


def _lease(args: argparse.Namespace, options: dict) -> _runner.Result:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise contract.UsageError("usage.no_command", "lease needs a command after --",
                                  f"{TOOL} lease --count 1 -- sglang generate ...")
    with gpu.leased_gpus(args.count, label=args.label, **options) as (gpus, lease):
        child_env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(g.index) for g in gpus),
                         CUDA_DEVICE_ORDER="PCI_BUS_ID")
        print(f"[lease] GPUs {[g.index for g in gpus]} held for: {' '.join(cmd)}", file=sys.stderr)
        try:
            # The child's stdout is ours only without --json: one JSON document must stay alone on stdout.
            # Own process group, dies with us (even on SIGKILL): the command never runs on an unleased GPU.
            rc = engine_process.run_tied(cmd, child_env, stdout=sys.stderr if getattr(args, "json", False) else None)
        except FileNotFoundError as exc:
            raise contract.UsageError("usage.command_not_found", f"command not found: {cmd[0]}",
                                      "check the command after --") from exc
    doc = contract.envelope("lease.v1", TOOL, ok=rc == 0, indices=[g.index for g in gpus],
                            uuids=[g.uuid for g in gpus], command=cmd, returncode=rc, reclaimed=lease.reclaimed)
    return _runner.Result(doc, f"command exited {rc}", exit_code=0 if rc == 0 else 1)


def render_inspect(doc: dict) -> str:
    lines = [f"sglang {doc['versions']['sglang'] or 'not installed'}, torch {doc['versions']['torch']} "
             f"(CUDA build {doc['versions']['torch_cuda_build']}), python {doc['versions']['python']}",
             f"repo root: {doc['sglang']['repo_root']} ({doc['sglang']['repo_root_reason']})",
             f"work root: {doc['directories']['work_root']} (writable: {doc['directories']['writable']})",
             f"GPUs: {len(doc['gpus'])}" + (f" ({doc['gpus_reason']})" if doc["gpus_reason"] else ""),
             f"HF token present: {doc['huggingface']['token_present']}"]
    for g in doc["gpus"]:
        lines.append(f"  [{g['index']}] {g['name']} used {g['memory_used_bytes']} B, util {g['utilization_pct']}%, "
                     f"{len(g['processes'])} process(es)")
    for p in doc["problems"]:
        lines.append(f"problem [{p['severity']}] {p['code']}: {p['message']} -> {p['hint']}")
    if not doc["ok"]:
        lines.append("not ready: fix the problem(s) of severity error above first")
    return "\n".join(lines)


def self_tests() -> list[selftest.Check]:
    def inspect_validates() -> str:
        doc = env.inspect(with_gpus=False)
        contract.check_document(doc)
        return f"inspect (GPU scan skipped) validates; {len(doc['problems'])} problem(s)"

    def fake_nvml_inventory() -> str:
        from ..engine.fake_nvml import FakeDevice, FakeNvml

        fake = FakeNvml([FakeDevice(uuid="GPU-a", used_mib=0, util=0),
                         FakeDevice(uuid="GPU-b", used_mib=4096, util=90, pids=[(123, 4 << 30)])])
        idle = [g.index for g in gpu.read_inventory(fake).gpus if gpu.is_idle(g)]
        if idle != [0]:
            raise AssertionError(f"expected only GPU 0 idle, got {idle}")
        return "NVML parsing picks the idle GPU of a two-GPU fake"

    return [*selftest.schema_checks(["env.v1", "env-path.v1", "idle-gpus.v1", "lease.v1"]),
            selftest.Check("inspect", inspect_validates), selftest.Check("nvml-fake", fake_nvml_inventory)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
