"""The shared primitives: file hashing, atomic writes, free space, the data-file reader and the HF settings."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from sgl_diffusion_bench import contract, datafile, fileio, hf_settings, paths


def test_sha256_streams_files_larger_than_one_chunk(tmp_path):
    data = os.urandom(fileio.HASH_CHUNK_BYTES * 2 + 17)
    (tmp_path / "big").write_bytes(data)
    assert fileio.sha256_file(tmp_path / "big") == hashlib.sha256(data).hexdigest()


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "doc.json"
    target.write_text("old")
    fileio.atomic_write_text(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["doc.json"]
    with pytest.raises(OSError):
        fileio.atomic_write_text(tmp_path / "missing-dir" / "doc.json", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_free_bytes_uses_the_nearest_existing_parent(tmp_path):
    assert fileio.free_bytes(tmp_path / "not" / "yet") == fileio.free_bytes(tmp_path) > 0


def test_data_file_reader_has_one_code_for_every_failure(tmp_path):
    missing, not_yaml, wrong = tmp_path / "missing.yaml", tmp_path / "bad.yaml", tmp_path / "wrong.yaml"
    not_yaml.write_text("assets: [unclosed\n")
    wrong.write_text(json.dumps({"schema": "assets.v1", "assets": [{"id": "x", "filename": 3}]}))
    for path, words in ((missing, "cannot read"), (not_yaml, "not valid YAML"), (wrong, "assets[0] (id='x')")):
        with pytest.raises(contract.InputError) as info:
            datafile.load(path, "assets.v1")
        assert info.value.code == datafile.DATA_FILE_INVALID and words in info.value.message
        assert str(path) in info.value.message and info.value.exit_code == contract.ExitCode.USAGE


def test_a_data_file_found_valid_is_read_back_unchecked_until_its_bytes_change(tmp_path, monkeypatch):
    """The checked copy saves every later run the YAML parse and the schema check (~0.25 s); it never hides an edit."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "assets.yaml"
    valid = {"schema": "assets.v1", "assets": []}
    path.write_text("schema: assets.v1\nassets: []\n")
    assert datafile.load(path, "assets.v1") == valid
    copies = list((tmp_path / "cache" / paths.DIST_NAME / datafile.CHECKED_DIR).iterdir())
    assert copies == [datafile.checked_copy(path.read_text(), "assets.v1")]
    assert json.loads(copies[0].read_text()) == valid

    def not_again(*_args, **_kwargs):
        raise AssertionError("parsed or checked again for bytes already found valid")
    with monkeypatch.context() as patched:
        patched.setattr(datafile, "schema_problems", not_again)
        patched.setattr(datafile.yaml, "load", not_again)
        assert datafile.load(path, "assets.v1") == valid
    path.write_text(json.dumps({"schema": "assets.v1", "assets": [{"id": "x", "filename": 3}]}))  # an edit
    with pytest.raises(contract.InputError) as info:
        datafile.load(path, "assets.v1")
    assert "assets[0] (id='x')" in info.value.message
    assert datafile.checked_copy(path.read_text(), "presets.v1") != datafile.checked_copy(path.read_text(), "assets.v1")
    # A damaged copy is parsed and checked again (and replaced); a cache that cannot be written costs the check only.
    path.write_text("schema: assets.v1\nassets: []\n")
    copies[0].write_text("{not json")
    assert datafile.load(path, "assets.v1") == valid and json.loads(copies[0].read_text()) == valid
    monkeypatch.setenv("XDG_CACHE_HOME", str(path))  # a file: no directory can be made below it
    assert datafile.load(path, "assets.v1") == valid


HUB_OFFLINE_PROBE = """
import importlib, json, os, sys
from huggingface_hub import constants
out = []
for env in json.loads(sys.argv[1]):
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.pop(name, None)
    os.environ.update(env)
    out.append(importlib.reload(constants).HF_HUB_OFFLINE)
print(json.dumps(out))
"""


def test_offline_agrees_with_huggingface_hub_itself():
    cases = [{}, {"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "on"}, {"HF_HUB_OFFLINE": "Yes"},
             {"HF_HUB_OFFLINE": "true"}, {"HF_HUB_OFFLINE": "0"}, {"HF_HUB_OFFLINE": "off"},
             {"HF_HUB_OFFLINE": "false"}, {"HF_HUB_OFFLINE": ""}, {"HF_HUB_OFFLINE": "2"},
             {"TRANSFORMERS_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}]
    hub = json.loads(subprocess.run([sys.executable, "-c", HUB_OFFLINE_PROBE, json.dumps(cases)], check=True,
                                    capture_output=True, text=True).stdout)
    ours = [hf_settings.offline(env) for env in cases]
    assert ours == hub and True in ours and False in ours


def test_every_token_variable_is_a_secret():
    env = {name: f"hf_value_{i}" for i, name in enumerate(hf_settings.TOKEN_VARS)}
    assert hf_settings.token_vars_set(env) == list(hf_settings.TOKEN_VARS)
    assert sorted(contract.secret_values(env)) == sorted(env.values())
    target, source = hf_settings.TOKEN_MIRROR
    assert {target, source} <= set(hf_settings.TOKEN_VARS)
