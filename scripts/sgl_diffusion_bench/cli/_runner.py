"""Shared CLI plumbing: argparse that raises instead of exiting, --json/--self-test, one document out."""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import bench_env, contract, hf_settings, progress, selftest

DEBUG_ENV = bench_env.DEBUG


class Parser(argparse.ArgumentParser):
    """argparse that turns usage errors into UsageError, so they become error.v1 JSON instead of exit 2 text, and
    never takes a prefix for an option (``--engine warm`` must not silently become ``--engine-capabilities warm``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise contract.UsageError("usage.invalid_arguments", f"{self.prog}: {message}",
                                  f"run '{self.prog} --help' for the accepted arguments")


def add_command(subparsers: Any, name: str, *, help: str, **kwargs: Any) -> Parser:
    """A subcommand whose help line in the list is also its own --help's description (and the options reference's
    account of it)."""
    return subparsers.add_parser(name, help=help, description=help, **kwargs)


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a decimal integer in [low, high]; anything else is a usage error at parse time."""
    def parse(text: str) -> int:
        stripped = text.strip()
        if not stripped.lstrip("+-").isdigit() or len(stripped) > 20:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
        value = int(stripped)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value
    parse.__name__ = "integer"
    return parse


def bounded_float(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (or (low, high]); NaN, Infinity and 1e999 are refused."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low or value > high or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{value} is outside {'(' if low_open else '['}{low}, {high}]")
        return value
    parse.__name__ = "number"
    return parse


@dataclasses.dataclass
class Result:
    """What a command produced: the document, an optional human rendering, and the exit code."""

    document: dict[str, Any]
    text: str | None = None
    exit_code: int | None = None  # default: 0 when document["ok"], else 1
    summary: str | None = None  # a long command's closing line on stderr, after everything else it prints


def json_flag_parent() -> argparse.ArgumentParser:
    """A parent parser so ``--json`` and ``--quiet`` are accepted before or after a subcommand."""
    parent = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parent.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print exactly one JSON document on stdout (human text goes to stderr)")
    parent.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress lines on stderr (each step over a few seconds announces itself and its "
                        "time otherwise)")
    return parent


def new_parser(prog: str, description: str, epilog: str = "") -> Parser:
    parser = Parser(prog=prog, description=description, epilog=epilog, parents=[json_flag_parent()],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true",
                        help="check this tool's own machinery here (schemas, bundled data, a fixture) and exit")
    return parser


EXIT_CODES_EPILOG = """exit codes: 0 ok; 1 a run failed or a row is invalid (the document is still printed);
2 bad usage or bad input; 3 precondition unmet, nothing run; 70 internal error; 130 interrupted."""


def write_output_file(path: str | Path, text: str, flag: str) -> str:
    """Write a side output (--markdown, --output); an unwritable path is the user's to fix, not a traceback."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise contract.UsageError("usage.output_unwritable", f"cannot write {target}: {exc.strerror or exc}",
                                  f"choose a writable path for {flag}") from None
    return str(target)


def _print_human(text: str | None, stream) -> None:
    if text:
        stream.write(_writable(contract.redact(text).rstrip("\n")) + "\n")
        stream.flush()


def _writable(text: str) -> str:
    """``text`` as any UTF-8 stream can carry it: a lone surrogate (from an exception's text, a hostile input) is
    written as its backslash escape instead of failing the write."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _serialised(document: dict) -> str:
    """The document's JSON, always writable: with a lone surrogate in a string, every non-ASCII character is
    escaped (still JSON that reads back to the same document)."""
    text = contract.dumps(document)
    return text if _writable(text) == text else contract.dumps(document, ascii_only=True)


def run(tool: str, parser: Parser, handler: Callable[[argparse.Namespace], Result],
        self_tests: Callable[[], list[selftest.Check]], argv: Sequence[str] | None = None) -> int:
    """Parse, dispatch, validate the document, print it; every failure becomes an error.v1 document. SIGTERM acts as
    Ctrl-C while the command runs; the caller's handler is back afterwards (a test that runs ``main`` in-process, and
    whatever it forks later, keeps its own)."""
    if not _is_main_thread():
        return _run(tool, parser, handler, self_tests, argv)
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        return _run(tool, parser, handler, self_tests, argv)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _run(tool: str, parser: Parser, handler: Callable[[argparse.Namespace], Result],
         self_tests: Callable[[], list[selftest.Check]], argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        args = parser.parse_args(argv)
        as_json = bool(getattr(args, "json", False))
        progress.set_quiet(bool(getattr(args, "quiet", False)))
        endpoint_problem = hf_settings.endpoint_problem()
        if endpoint_problem:
            raise contract.UsageError("config.bad_hf_endpoint", endpoint_problem,
                                      "unset HF_ENDPOINT, or set it to the hub (or mirror) URL, e.g. https://huggingface.co")
        if args.self_test:
            doc = selftest.run_checks(tool, self_tests())
            result = Result(doc, selftest.render_text(doc))
        else:
            result = handler(args)
        contract.check_document(result.document)
        exit_code = result.exit_code if result.exit_code is not None else (0 if result.document.get("ok") else 1)
    except contract.ToolError as exc:
        result, exit_code = Result(contract.error_document(exc, tool)), int(exc.exit_code)
        result.text = f"error [{exc.code}]: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else "")
    except KeyboardInterrupt:
        exc = contract.ToolError("run.interrupted", "interrupted before the command finished",
                                 "re-run the command; partial results, if any, were written where the log says",
                                 exit_code=contract.ExitCode.INTERRUPTED)
        result, exit_code = Result(contract.error_document(exc, tool)), int(exc.exit_code)
        result.text = f"error [{exc.code}]: {exc.message}"
    except Exception as exc:  # last resort: our own bug still yields a valid error document
        if bench_env.get(DEBUG_ENV):
            traceback.print_exc()
        err = contract.ToolError("internal.unexpected", f"{type(exc).__name__}: {exc}",
                                 f"this is a bug; re-run with {DEBUG_ENV}=1 for a traceback and report it",
                                 exit_code=contract.ExitCode.INTERNAL)
        result, exit_code = Result(contract.error_document(err, tool)), int(err.exit_code)
        result.text = f"error [{err.code}]: {err.message}\nhint: {err.hint}"
    try:
        text = _serialised(result.document)  # once: a plan of 10,000 runs takes seconds to write
    except (ValueError, TypeError) as exc:  # a non-finite or unserialisable value: still one valid document
        err = contract.ToolError("internal.unserialisable", f"the result could not be written as JSON: {exc}",
                                 f"this is a bug; re-run with {DEBUG_ENV}=1 and report it",
                                 exit_code=contract.ExitCode.INTERNAL)
        result, exit_code = Result(contract.error_document(err, tool), f"error [{err.code}]: {err.message}"), 70
        text = _serialised(result.document)
    if as_json:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        _print_human(result.text if exit_code else None, sys.stderr)
    else:
        _print_human(result.text if result.text is not None else text,
                     sys.stdout if exit_code == 0 else sys.stderr)
    _print_human(f"[{tool}] {result.summary}" if result.summary else None, sys.stderr)
    return exit_code


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_keyboard_interrupt(signum, frame):  # SIGTERM behaves like Ctrl-C: clean up, write partial results
    raise KeyboardInterrupt
