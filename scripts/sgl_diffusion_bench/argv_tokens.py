"""Engine command lines as token lists: which flags they name and which values those take. Pure functions, no engine
knowledge (what a flag means lives with its users)."""

from __future__ import annotations

from typing import Iterable, Sequence


def flag_name(token: str) -> str | None:
    return token.split("=", 1)[0] if token.startswith("--") else None


def flag_values(argv: Sequence[str], flag: str) -> list[str]:
    """Every value ``flag`` takes in ``argv`` (``--f=v``, ``--f v``; a bare ``--f`` is "true"), in order."""
    values = []
    for i, token in enumerate(argv):
        if token == flag:
            following = argv[i + 1] if i + 1 < len(argv) else None
            values.append("true" if following is None or following.startswith("--") else following)
        elif token.startswith(flag + "="):
            values.append(token.split("=", 1)[1])
    return values


def split_flags(args: Sequence[str]) -> list[tuple[str, list[str], list[str]]]:
    """(flag, values, original tokens) for ``--k=v``, ``--k v1 v2`` and bare ``--k``, in order."""
    pairs: list[tuple[str, list[str], list[str]]] = []
    for token in args:
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            pairs.append((flag, [value] if eq else [], [token]))
        elif pairs:
            pairs[-1][1].append(token)
            pairs[-1][2].append(token)
        else:
            pairs.append((token, [], [token]))
    return pairs


def duplicate_flags(sources: Iterable[tuple[str, Sequence[str]]]) -> dict[str, list[str]]:
    """Flags named more than once across (or within) ``sources`` -> the sources naming them, in order."""
    seen: dict[str, list[str]] = {}
    for source, tokens in sources:
        for token in tokens:
            flag = flag_name(token)
            if flag:
                seen.setdefault(flag, []).append(source)
    return {flag: where for flag, where in seen.items() if len(where) > 1}


def parse_cli_tokens(tokens: Sequence[str]) -> dict[str, str]:
    """The reference's token rules: --k=v -> v; --k v -> v unless v starts with --; bare --k -> "true";
    tokens without a leading -- are skipped. Boolean words are normalised to true/false."""
    parsed: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            i += 1
            continue
        if "=" in token:
            key, value = token[2:].split("=", 1)
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            key, value = token[2:], tokens[i + 1]
            i += 1
        else:
            key, value = token[2:], "true"
        parsed[key] = value.lower() if value.lower() in ("true", "false") else value
        i += 1
    return parsed


def last_value(tokens: Sequence[str], flag: str) -> str | None:
    """The value argparse keeps for ``flag`` (the last occurrence wins), in ``--f=v`` or ``--f v`` form."""
    value = None
    for i, token in enumerate(tokens):
        if token.startswith(flag + "="):
            value = token.split("=", 1)[1]
        elif token == flag and i + 1 < len(tokens):
            value = tokens[i + 1]
    return value
