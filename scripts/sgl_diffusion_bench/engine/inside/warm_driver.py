"""A warm engine: the engine's own ``sglang generate`` path, with the model built once and many requests served.

Runs inside the engine's interpreter (stdlib and sglang only: the bundle need not be installed there), started as
``python warm_driver.py <sglang generate arguments>``. It builds ``sglang.multimodal_gen.DiffGenerator`` from those
arguments exactly as ``sglang generate`` does (the same parser, ``ServerArgs.from_cli_args``, the same warmup
flags), prints ``READY``, then reads one JSON request per stdin line: ``{"id": ..., "argv": [<generate
arguments>]}``. Each request runs through the engine's own ``generate_cmd`` (its sampling-parameter parsing,
output saving and perf dump), with ``DiffGenerator.from_pretrained`` answered by the generator built at start, so
a warm request writes the same perf dump and output a cold ``sglang generate`` would. The request's log lines sit
between its ``BEGIN`` and ``END`` markers on stdout; ``{"quit": true}`` or end of input shuts the engine down.

The server arguments of a request are parsed but not applied: the caller sends only requests whose engine flags
equal the ones this engine was built with.

``python warm_driver.py --probe <code>`` is the engine probe in the interpreter a warm engine can then become: it runs
the probe's code (which prints its result), says ``PROBED``, and waits for one stdin line. End of input or anything
but ``{"build": {"argv": [...], "env": {...}, "cwd": ...}}`` exits; a build message takes that environment and
working directory and carries on as ``main(argv)``, so the sglang the probe imported is not imported a second time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

MARKER = "[sgl-bench-warm]"


def say(*words: object) -> None:
    print(MARKER, *words, flush=True)


def _parser():
    from sglang.multimodal_gen.runtime.entrypoints.cli.generate import add_multimodal_gen_generate_args

    parser = argparse.ArgumentParser(description="warm sglang generate")
    add_multimodal_gen_generate_args(parser)
    return parser


def main(engine_argv: list[str]) -> int:
    start = time.monotonic()
    from sglang.multimodal_gen import DiffGenerator
    from sglang.multimodal_gen.runtime.entrypoints.cli import generate as generate_module
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    parser = _parser()
    parsed, unknown = parser.parse_known_args(engine_argv)
    parsed.request_id = "warm_engine_build"
    server_args = ServerArgs.from_cli_args(parsed, unknown)
    generator = DiffGenerator.from_pretrained(model_path=server_args.model_path, server_args=server_args,
                                              local_mode=True)

    class BuiltGenerator:
        """What ``generate_cmd`` gets instead of building a new engine: the one built above, never shut down."""

        @staticmethod
        def from_pretrained(*_args, **_kwargs):
            return _Borrowed(generator)

    generate_module.DiffGenerator = BuiltGenerator
    say("READY", f"{time.monotonic() - start:.3f}")
    code = 0
    try:
        for raw in sys.stdin:
            raw = raw.strip()
            if not raw:
                continue
            request = json.loads(raw)
            if request.get("quit"):
                break
            rid = request["id"]
            say("BEGIN", rid)
            began = time.monotonic()
            try:
                args, extra = parser.parse_known_args(request["argv"])
                generate_module.generate_cmd(args, extra)
            except Exception as exc:  # the request failed; the engine keeps serving the next one
                traceback.print_exc(file=sys.stdout)
                say("END", rid, "error", f"{time.monotonic() - began:.6f}", f"{type(exc).__name__}: {exc}"[:300])
                continue
            say("END", rid, "ok", f"{time.monotonic() - began:.6f}")
    finally:
        try:
            generator.shutdown()
        except Exception:  # already gone: nothing left to stop
            code = 1
        say("EXIT")
    return code


class _Borrowed:
    """The built generator with ``shutdown`` turned into a no-op (``generate_cmd`` shuts down after each call)."""

    def __init__(self, generator):
        self._generator = generator

    def generate(self, *args, **kwargs):
        return self._generator.generate(*args, **kwargs)

    def shutdown(self) -> None:
        return None


def probe_then_build(code: str) -> int:
    """The probe, then (if asked) the engine built in the same interpreter; see the module's docstring."""
    import os

    exec(compile(code, "<engine probe>", "exec"), {"__name__": "__engine_probe__"})
    say("PROBED", os.getpid())
    line = sys.stdin.readline()
    build = json.loads(line).get("build") if line.strip() else None
    if not build:
        return 0
    os.environ.clear()
    os.environ.update(build["env"])
    os.chdir(build["cwd"])
    sys.argv = [sys.argv[0], *build["argv"]]
    say("BUILD", os.getpid())  # the engine's log names the probe's process it was built in
    return main(build["argv"])


def _exit_now(code: int) -> None:
    """Leave without the interpreter's teardown once the engine is shut down (EXIT said): multiprocessing's exit
    handler would join the scheduler process sglang's shutdown leaves running, ~10 s on 2 cores before the first
    report could be written; the caller stops the whole process group after this exit, that process included."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(probe_then_build(sys.argv[2]) if sys.argv[1:2] == ["--probe"] else main(sys.argv[1:]))
