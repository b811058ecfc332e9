"""collect_pr_evidence: one command from "is my change faster?" to a PR evidence folder a reviewer can verify.

run: readiness, the warm A/B/B/A campaign until a verdict or the budget, output identity, one profiled request per
arm, trace compare and fast-path classification, BCG replay when an arm uses BCG, cache cleanup and its re-check;
each step recorded in <out>/evidence.json (resumable: run it again to finish an interrupted folder), rendered as
EVIDENCE.md and a plot. verify: re-hash, re-validate, re-judge and recompute the folder; exit 0 only when all agree.
render: write EVIDENCE.md and the plot again from the folder's documents."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import contract, selftest
from ..engine import engine_overlap
from ..evidence import manifest, render, request, verify
from . import _runner

TOOL = manifest.TOOL
EPILOG = """examples:
  python3 scripts/collect_pr_evidence.py run --out evidence/speed --model tiny-flux-cpu \\
      --candidate-args '--performance-mode speed' --budget-requests 16 --json
  python3 scripts/collect_pr_evidence.py run --out evidence/bcg --model flux --bcg --json
  python3 scripts/collect_pr_evidence.py verify evidence/speed --json
  python3 scripts/collect_pr_evidence.py render evidence/speed --json

""" + _runner.EXIT_CODES_EPILOG


def build_parser() -> _runner.Parser:
    parser = _runner.new_parser(TOOL, __doc__.strip(), EPILOG)
    sub = parser.add_subparsers(dest="command", parser_class=_runner.Parser)
    parent = _runner.json_flag_parent()
    p = _runner.add_command(sub, "run", parents=[parent], help="make (or resume) the evidence folder of one change")
    p.add_argument("--out", required=True, help="the evidence folder: new, empty, or this request's own to resume")
    p.add_argument("--model", required=True, help="the preset (see bench_diffusion_denoise.py --list-models)")
    p.add_argument("--model-path", help="run the preset's request against this local model directory")
    p.add_argument("--override", action="append", default=[], metavar="FIELD=VALUE",
                   help="replace a preset request field (repeatable), as in bench_diffusion_denoise.py")
    p.add_argument("--bcg", action="store_true", help="the seed PR's experiment: eager against breakable CUDA graphs")
    p.add_argument("--baseline-args", default="", help="extra engine flags of the baseline, one shell string")
    p.add_argument("--candidate-args", default="", help="extra engine flags of the candidate, one shell string")
    p.add_argument("--extra-args", default="", help="engine flags both arms share, one shell string (e.g. "
                                                    "'--attention-backend torch_sdpa' on Hopper without FA3); "
                                                    "allowed with --bcg")
    p.add_argument("--threshold", type=_runner.bounded_float(0, 100, low_open=True), default=1.5,
                   help="smallest change in percent that counts (default 1.5)")
    p.add_argument("--samples", type=_runner.bounded_int(1, 1000), default=1,
                   help="measured requests per slot (A1, B1, ...), back to back (default 1)")
    p.add_argument("--budget-requests", type=_runner.bounded_int(1, 1_000_000),
                   help="most measured requests the campaign may spend (default 8 rounds: 32 x --samples)")
    p.add_argument("--budget-minutes", type=_runner.bounded_float(0, 7 * 24 * 60, low_open=True),
                   help="start no further A/B/B/A round after this many minutes of campaign")
    p.add_argument("--engine-overlap", choices=engine_overlap.MODES, default="auto",
                   help="load the baseline's and the candidate's engines side by side when both fit: auto (default; "
                        "GPU only), early (both at launch, CPU too), on (the candidate's beside the baseline's "
                        "warm-up, CPU too), off")
    p.add_argument("--model-cache-root", help="an isolated HF cache below this directory, deleted and ledgered "
                                              "after the campaign, the ledger re-checked")
    for name, text in (("verify", "re-check a folder: hashes, schemas, log gates, statistics, EVIDENCE.md"),
                       ("render", "write EVIDENCE.md and the plot again from the folder's documents")):
        q = _runner.add_command(sub, name, parents=[parent], help=text)
        q.add_argument("dir", metavar="DIR", help="an evidence folder")
    return parser


def render_run(doc: dict) -> str:
    lines = [f"evidence {doc['state']} in {doc['out_dir']}"]
    for step in doc["steps"]:
        lines.append(f"  [{step['status']}] {step['name']}" + (f": {step['reason']}" if step["reason"] else ""))
    return "\n".join(lines + [f"next: python3 scripts/collect_pr_evidence.py verify {doc['out_dir']}"])


def run_summary(doc: dict) -> str:
    """The closing line: the state, the campaign's verdict, the steps, where EVIDENCE.md is and what to run next."""
    result = manifest.step(doc, "campaign")["result"] or {}
    verdict = (f"verdict {result.get('verdict')} ({result.get('valid_cells')}/{result.get('cells')} cells valid)"
               if result else "no verdict (the campaign did not finish)")
    statuses = [s["status"] for s in doc["steps"]]
    tally = ", ".join(f"{statuses.count(k)} {k}" for k in dict.fromkeys(statuses))
    failed = [s["name"] for s in doc["steps"] if s["status"] in ("failed", "interrupted")]
    markdown = Path(doc["out_dir"]) / render.MARKDOWN_NAME
    return (f"evidence {doc['state']}: {verdict}; steps {tally}"
            + (f" ({', '.join(failed)})" if failed else "")
            + (f"; {markdown}" if markdown.is_file() else "")
            + f"; next: collect_pr_evidence.py verify {doc['out_dir']}")


def request_of(args: argparse.Namespace) -> request.EvidenceRequest:
    """The typed request of a parsed ``run`` command line (also how a folder's reproduce command is checked)."""
    return request.build(model=args.model, model_path=args.model_path, overrides=args.override, bcg=args.bcg,
                         baseline_args=args.baseline_args, candidate_args=args.candidate_args,
                         threshold_pct=args.threshold, samples=args.samples, budget_requests=args.budget_requests,
                         model_cache_root=args.model_cache_root, budget_minutes=args.budget_minutes,
                         common_args=args.extra_args, engine_overlap=args.engine_overlap)


def _run(args: argparse.Namespace) -> _runner.Result:
    from ..evidence import run  # the campaign, profiling and trace machinery: verify and render never need it

    doc = run.run(Path(args.out), request_of(args))
    return _runner.Result(doc, render_run(doc), summary=run_summary(doc))


def _verify(args: argparse.Namespace) -> _runner.Result:
    payload = verify.verify(Path(args.dir))
    doc = contract.envelope("evidence-verify.v1", TOOL, **payload)
    lines = [f"{'VERIFIED' if payload['ok'] else 'NOT VERIFIED'}: {payload['dir']}"]
    lines += [f"  {f['file']} [{f['check']}]: expected {f['expected']}; found {f['found']}"
              for f in payload["findings"]]
    return _runner.Result(doc, "\n".join(lines))


def _render(args: argparse.Namespace) -> _runner.Result:
    root = Path(args.dir)
    doc = manifest.load(root) if root.is_dir() else None
    if doc is None:
        raise contract.InputError("evidence.manifest_missing", f"{root} has no {manifest.NAME}: not an evidence "
                                  "folder", "pass the --out folder of collect_pr_evidence.py run")
    doc["rendered"] = render.write(root, doc)
    manifest.save(root, doc)
    return _runner.Result(doc, f"wrote {root / render.MARKDOWN_NAME}")


def handle(args: argparse.Namespace) -> _runner.Result:
    if args.command is None:
        raise contract.UsageError("usage.no_command", "no subcommand given", f"run '{TOOL} --help'")
    return {"run": _run, "verify": _verify, "render": _render}[args.command](args)


def self_tests() -> list[selftest.Check]:
    def request_hash() -> str:
        one = request.build(model="tiny-flux-cpu", model_path=None, overrides=[], bcg=False, baseline_args="",
                            candidate_args="--log-level info", threshold_pct=1.5, samples=1, budget_requests=None,
                            model_cache_root=None)
        other = request.build(model="tiny-flux-cpu", model_path=None, overrides=[], bcg=False, baseline_args="",
                              candidate_args="--log-level  info", threshold_pct=2.0, samples=1, budget_requests=None,
                              model_cache_root=None)
        if request.differing_fields(one.to_json(), other.to_json()) != ["threshold_pct"]:
            raise AssertionError(f"normalisation is wrong: {request.differing_fields(one.to_json(), other.to_json())}")
        return "two spellings of one change hash alike; a different threshold is named"

    return [*selftest.schema_checks(["evidence.v1", "evidence-verify.v1"]), selftest.Check("request", request_hash)]


def main(argv=None) -> int:
    return _runner.run(TOOL, build_parser(), handle, self_tests, argv)
