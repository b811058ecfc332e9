"""A request manifest is untrusted input: it is split into lines exactly as the engine's reader splits them, and a
line that would crash a later step (a non-finite guidance scale, a lone surrogate, a line nested past json's limit)
is refused naming its line, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgl_diffusion_bench import contract, work_dirs
from sgl_diffusion_bench.engine import request_manifest

LOCATION = work_dirs.sglang_location()
PACKAGE_DIR = Path(LOCATION["package_dir"]) if LOCATION["installed"] else None
pytestmark = pytest.mark.skipif(PACKAGE_DIR is None or not (PACKAGE_DIR / request_manifest.MANIFEST_SOURCE).is_file(),
                                reason="needs an installed sglang that ships the manifest parser (0.5.23+)")


def _load(tmp_path: Path, text: str):
    path = tmp_path / "requests.jsonl"
    path.write_text(text, encoding="utf-8")
    return request_manifest.load_manifest(path, PACKAGE_DIR, (64, 64))


def _refused(tmp_path: Path, text: str) -> contract.InputError:
    with pytest.raises(contract.InputError) as refused:
        _load(tmp_path, text)
    assert refused.value.code == "input.bad_manifest"
    return refused.value


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_guidance_scale_is_refused_with_its_line(tmp_path, value):
    good = json.dumps({"prompt": "a cat", "request_id": "r1"})
    refused = _refused(tmp_path, good + "\n" + '{"prompt": "a dog", "request_id": "r2", "guidance_scale": '
                       + value + "}\n")
    assert refused.details["line"] == 2 and "finite" in refused.message


def test_a_line_separator_inside_a_prompt_keeps_the_line_numbers_the_engine_gives(tmp_path):
    text = "".join(json.dumps({"prompt": f"one\u2028two\x85three {n}", "request_id": f"r{n}"}, ensure_ascii=False)
                   + "\n" for n in range(3))
    specs, _ = _load(tmp_path, text)
    assert [s.line for s in specs] == [1, 2, 3] and specs[2].prompt == "one\u2028two\x85three 2"


def test_a_lone_surrogate_and_a_deep_line_are_refused_with_their_lines(tmp_path):
    refused = _refused(tmp_path, '{"prompt": "ok", "request_id": "a"}\n{"prompt": "bad \\ud800", "request_id": "b"}\n')
    assert refused.details["line"] == 2 and "surrogate" in refused.message
    deep = '{"prompt": "p", "request_id": "d", "sampling_params": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    assert "refused" in _refused(tmp_path, deep).message


def test_serving_refuses_a_sampling_field_its_requests_cannot_carry_as_campaigns_do(tmp_path):
    """Issue 44: serving sent only its payload's fields and dropped the rest without a word; the same rule as a
    campaign's now refuses the line, naming the field and what a serving request can carry."""
    line = json.dumps({"prompt": "a cat", "request_id": "r1", "sampling_params": {"true_cfg_scale": 4.0}})
    refused = _refused(tmp_path, line + "\n")
    assert refused.details["line"] == 1 and refused.message.count("true_cfg_scale: a serving request") == 1
    assert "guidance_scale" in refused.message and "num_frames" not in refused.message
    fine = json.dumps({"prompt": "a cat", "request_id": "r1", "sampling_params": {"guidance_scale": 3.5,
                                                                                     "num_outputs_per_prompt": 2}})
    specs, _ = _load(tmp_path, fine + "\n")
    assert specs[0].payload()["guidance_scale"] == 3.5 and specs[0].payload()["n"] == 2


_LINES = [json.dumps({"prompt": "a cat", "request_id": "ok", "width": 64, "height": 72, "seed": 3}),
          '{"prompt": "a dog", "guidance_scale": NaN}', '{"prompt": "x", "width": 60}', '{"prompt": "\\ud800"}',
          '{"prompt": "deep", "sampling_params": ' + "[" * 3000 + "]" * 3000 + "}", '{"prompt": "a\u2028b\x85c"}',
          "[]", "{}", "null", '{"prompt": "p", "colour": "red"}', '{"prompt": "p", "seed": ' + "9" * 40 + "}",
          '{"prompt": "p", "num_inference_steps": -2}', '{"prompt": "p", "width": true}', "", "   ",
          '{"prompt": "p", "sampling_params": {"true_cfg_scale": 4}}', '{"prompt": 5}', '{"prompt": "p"',
          "\ufeff{}"]


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(lines=st.lists(st.one_of(st.sampled_from(_LINES), st.text(max_size=20)), max_size=8),
       ending=st.sampled_from(["\n", "\r\n", "\r"]))
def test_any_manifest_text_gives_requests_or_a_refusal_naming_a_line(tmp_path_factory, lines, ending):
    """Issue 44: for any manifest text, the requests (each sized for the pipeline, finite, writable as JSON) or an
    input.bad_manifest refusal whose line, when it names one, is a line of the file; nothing else escapes."""
    path = tmp_path_factory.mktemp("manifest") / "requests.jsonl"
    path.write_text(ending.join(lines) + ending, encoding="utf-8", errors="surrogatepass")
    count = len(path.read_text(encoding="utf-8", errors="replace").splitlines()) + 1
    try:
        specs, digest = request_manifest.load_manifest(path, PACKAGE_DIR, (64, 64))
    except contract.InputError as exc:
        assert exc.code == "input.bad_manifest"
        assert exc.details.get("line") is None or 1 <= exc.details["line"] <= count
        return
    assert len(digest) == 64 and len(specs) <= count
    for spec in specs:
        assert spec.width % 8 == 0 and spec.height % 8 == 0 and 1 <= spec.line <= count
        json.dumps(spec.to_json(), allow_nan=False).encode("utf-8")
