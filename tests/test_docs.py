"""The skill documents are proven by the tests: front matter, links, generated tables, every fenced shell command,
and every JSON field a document names.

Conventions (documented in benchmark-and-profile.md):
- a ```bash block runs as one `bash -euo pipefail` script from the repo root, with the venv first on PATH;
- a ```bash block preceded by `<!-- doc-test: parse-only -->` is not run: each `python3 scripts/<name>.py ...`
  command in it must be accepted by that script's argparse parser (for commands that need a GPU or a hub);
- a field reference is written `<schema-id>:<path>` in backticks (`env.v1:problems[].code`) and must resolve.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import HF_TOKEN_CANARY, REPO
from sgl_diffusion_bench import doc_tables

DOCS = [REPO / name for name in ("SKILL.md", "benchmark-and-profile.md", "existing-fast-paths.md", "README.md")]
SKILL_DOCS = DOCS[:3]
FENCE = re.compile(r"(?P<marker><!-- doc-test: (?P<mode>[a-z-]+) -->\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)```", re.S)
FIELD_REF = re.compile(r"`(?P<schema>[a-z][a-z0-9-]*\.v[0-9]+):(?P<path>[A-Za-z0-9_.\[\]-]+)`")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")
CLI_MODULES = {"diffusion_skill_env": "env", "bench_diffusion_denoise": "bench", "compare_perf": "compare",
               "render_bench_report": "report", "profile_diffusion": "profile", "analyze_trace": "trace",
               "cleanup_model_cache": "cache"}


def blocks(doc: Path, lang: str = "bash"):
    for match in FENCE.finditer(doc.read_text(encoding="utf-8")):
        if match["lang"] == lang:
            line = doc.read_text(encoding="utf-8")[: match.start()].count("\n") + 1
            yield pytest.param(doc, match["mode"], match["body"], id=f"{doc.name}:{line}")


ALL_BLOCKS = [p for doc in DOCS for p in blocks(doc)]


def test_front_matter_follows_the_skill_spec():
    text = (REPO / "SKILL.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n", 2)[1])
    assert set(front) <= {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", front["name"]) and len(front["name"]) <= 64
    assert front["name"] == "sglang-diffusion-benchmark-profile"
    assert 50 < len(front["description"]) <= 1024 and "Use this skill" in front["description"]
    assert len(text.splitlines()) < 250, "SKILL.md stays short; details go one link away"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve_with_exact_case(doc):
    for match in LINK.finditer(doc.read_text(encoding="utf-8")):
        target = match["target"]
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path = REPO
        for part in Path(target).parts:
            if part == "..":
                path = path.parent
                continue
            names = os.listdir(path) if path.is_dir() else []
            assert part in names, f"{doc.name}: link {target} does not resolve (exact case) at {path}"
            path = path / part


def test_generated_tables_match_the_data():
    stale = doc_tables.sync_docs(REPO, write=False)
    assert stale == {}, f"regenerate with: PYTHONPATH=scripts python3 -m sgl_diffusion_bench.doc_tables --write ({stale})"
    text = "".join(d.read_text() for d in SKILL_DOCS)
    for name in doc_tables.RENDERERS:
        assert f"<!-- BEGIN GENERATED: {name} -->" in text, f"no generated block {name} in the docs"


def _resolve(schema: dict, path: str, root: dict, schema_id: str) -> None:
    """Walk ``path`` through the schema, following $ref (also into other schema files), items and properties."""
    node = schema
    for token in re.findall(r"[^.\[\]]+|\[\]", path):
        node, root = _deref(node, root)
        if token == "[]":
            assert "items" in node, f"{schema_id}:{path}: {token} on a non-array"
            node = node["items"]
            continue
        found = None
        for cand in [node, *[s for key in ("oneOf", "anyOf", "allOf") for s in node.get(key, [])]]:
            cand, cand_root = _deref(cand, root)
            if token in cand.get("properties", {}):
                found, root = cand["properties"][token], cand_root
                break
            if isinstance(cand.get("additionalProperties"), dict):
                found, root = cand["additionalProperties"], cand_root
        assert found is not None, f"{schema_id}:{path}: no field {token!r}"
        node = found


def _deref(node: dict, root: dict) -> tuple[dict, dict]:
    """The node with its $ref chain merged in, and the document that local refs inside it now refer to."""
    while "$ref" in node:
        file, _, pointer = node["$ref"].partition("#")
        if file:
            root = json.loads((REPO / "schemas" / file).read_text())
        target = root
        for part in pointer.strip("/").split("/") if pointer.strip("/") else []:
            target = target[part]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **rest, "properties": {**target.get("properties", {}), **rest.get("properties", {})}}
    return node, root


@pytest.mark.parametrize("doc", SKILL_DOCS, ids=lambda p: p.name)
def test_every_field_reference_exists_in_its_schema(doc):
    refs = list(FIELD_REF.finditer(doc.read_text(encoding="utf-8")))
    for ref in refs:
        schema_file = REPO / "schemas" / f"{ref['schema']}.schema.json"
        assert schema_file.is_file(), f"{doc.name}: {ref.group(0)} cites a schema that does not exist"
        root = json.loads(schema_file.read_text())
        _resolve(root, ref["path"], root, ref["schema"])
    if doc.name == "SKILL.md":
        assert len(refs) >= 8, "SKILL.md names the fields each step's output feeds to the next"


def _script_commands(body: str):
    joined = re.sub(r"\\\n\s*", " ", body)
    for line in joined.splitlines():
        line = line.strip()
        m = re.match(r"(?:\S+=\S+\s+)*python3\s+scripts/(?P<name>[a-z_]+)\.py(?P<rest>.*)$", line)
        if m:
            yield m["name"], shlex.split(m["rest"].split(" | ")[0].split(" > ")[0], comments=True)


@pytest.mark.parametrize("doc, mode, body", ALL_BLOCKS)
def test_documented_commands_run(doc, mode, body, tmp_path):
    if mode == "parse-only":
        commands = list(_script_commands(body))
        assert commands, "a parse-only block must hold at least one of our scripts"
        for name, argv in commands:
            module = importlib.import_module(f"sgl_diffusion_bench.cli.{CLI_MODULES[name]}")
            module.build_parser().parse_args(argv)  # raises UsageError if argparse rejects it
        return
    assert mode is None, f"unknown doc-test mode {mode!r}"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               SGLANG_DIFFUSION_SKILL_WORKDIR=str(tmp_path), HF_TOKEN=HF_TOKEN_CANARY)
    before = _untracked()
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, f"{doc.name} block failed ({proc.returncode}):\n{body}\n--- stderr ---\n{proc.stderr[-3000:]}"
    assert HF_TOKEN_CANARY not in proc.stdout + proc.stderr
    assert _untracked() == before, "a documented command wrote files into the checkout"


def _untracked() -> set[str]:
    out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=REPO, capture_output=True,
                         text=True)
    return set(out.stdout.split())
