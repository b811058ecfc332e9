"""A large trace decoded in pieces, in one process or several, gives exactly the trace a whole-file decode gives,
whatever the file's form (plain or gzip, an object or a bare list); a cut that lands inside a string, a damaged file
or a dead worker falls back to the whole-file decode, which gives the real answer."""

from __future__ import annotations

import gzip
import json
import os
import signal

import pytest

from conftest import TEST_FIXTURES
from sgl_diffusion_bench.contract import InputError
from sgl_diffusion_bench.trace import load, pieces
from sgl_diffusion_bench.trace.model import TableBuilder
from sgl_diffusion_bench.trace.summary import hotspots_body

GRAPH = TEST_FIXTURES / "traces-h200" / "flux-graph-2_steps-full_stages-global-rank0.trace.json.gz"
TP2_RANK1 = TEST_FIXTURES / "traces-h200-tp2" / "flux-tp2-graph-2_steps-full_stages-global-rank1.trace.json.gz"


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    """Pieces of 256 KB for files of any size, so the kept fixtures (10 MB of JSON) are cut into dozens."""
    monkeypatch.setattr(pieces, "MIN_BYTES", 1)
    monkeypatch.setattr(pieces, "PIECE_BYTES", 1 << 18)


def _whole(path, monkeypatch):
    """The trace decoded the plain way: the whole file in one go."""
    with monkeypatch.context() as patch:
        patch.setattr(pieces, "MIN_BYTES", 1 << 62)
        return load.load_trace(path)


def _same(a, b) -> None:
    body_a, body_b = hotspots_body(a, None), hotspots_body(b, None)
    assert body_a["trace"].pop("path") == str(a.source) and body_b["trace"].pop("path") == str(b.source)
    assert body_a == body_b
    assert (a.event_count, a.rank, a.world_size, a.stages, a.steps) == (b.event_count, b.rank, b.world_size,
                                                                       b.stages, b.steps)
    assert sorted(a.names) == sorted(b.names)


def _doc(source=GRAPH) -> dict:
    return json.loads(gzip.decompress(source.read_bytes()))


@pytest.mark.parametrize("form", ["gzip", "plain", "compact-list"])
def test_pieces_give_the_trace_a_whole_decode_gives(tmp_path, monkeypatch, form):
    if form == "gzip":
        path = TP2_RANK1  # distributedInfo (rank 1 of 2) comes from whichever piece holds it
    elif form == "plain":
        path = tmp_path / "graph.trace.json"
        path.write_bytes(gzip.decompress(GRAPH.read_bytes()))  # kineto's own layout, mapped
    else:
        path = tmp_path / "graph-list.json"
        path.write_text(json.dumps(_doc()["traceEvents"], separators=(",", ":")), encoding="utf-8")
    text = pieces.map_plain_file(path) or load.read_trace_bytes(path)
    assert len(pieces.cut_points(text, 5)) == 4 and pieces.decode_in_pieces(text, 3) is not None  # cut, and decoded
    if form == "gzip":  # decompressed while it is decoded, never whole: the same tables and size
        streamed = pieces.decode_gzip_in_pieces(path.read_bytes(), 3)
        assert streamed is not None and streamed[2] == len(text) and streamed[1].rank == 1
    whole = _whole(path, monkeypatch)
    _same(whole, load.load_trace(path, processes=1))
    _same(whole, load.load_trace(path, processes=3))


def test_a_cut_inside_a_string_falls_back_to_the_whole_decode(tmp_path, monkeypatch):
    doc = _doc()
    events = doc["traceEvents"]
    middle = len(events) // 2
    # An event whose name is most of the file, full of what a cut looks for: every cut lands inside that string.
    filler = "x}, {" * (len(json.dumps(events)) // 5)
    events.insert(middle, {"ph": "X", "cat": "cpu_op", "name": filler, "pid": 1, "tid": 1, "ts": 0, "dur": 0})
    path = tmp_path / "odd-names.trace.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    text = pieces.map_plain_file(path)
    cuts = pieces.cut_points(text, 2)
    assert cuts and text[cuts[0][0] - 2:cuts[0][1] + 2] == b"x}, {x"  # the cut is inside the name
    assert pieces.decode_in_pieces(text, 2) is None
    trace = load.load_trace(path, processes=2)
    _same(_whole(path, monkeypatch), trace)
    assert filler in trace.names


def test_a_damaged_large_file_gets_the_whole_decode_error(tmp_path):
    path = tmp_path / "cut.trace.json"
    path.write_bytes(gzip.decompress(GRAPH.read_bytes())[:-20_000])
    with pytest.raises(InputError) as caught:
        load.load_trace(path, processes=2)
    assert caught.value.code == "input.trace_truncated"


def test_a_killed_worker_falls_back_to_the_whole_decode(monkeypatch):
    parent, add = os.getpid(), TableBuilder.add

    def dies_in_a_worker(builder, events):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        add(builder, events)

    monkeypatch.setattr(TableBuilder, "add", dies_in_a_worker)
    assert pieces.decode_in_pieces(load.read_trace_bytes(GRAPH), 2) is None
    _same(_whole(GRAPH, monkeypatch), load.load_trace(GRAPH, processes=2))


def test_a_gzip_of_several_members_is_streamed_across_them(tmp_path, monkeypatch):
    text = gzip.decompress(GRAPH.read_bytes())
    path = tmp_path / "two-members.trace.json.gz"
    half = len(text) // 2
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))  # as `cat a.gz b.gz` makes
    assert pieces.decode_gzip_in_pieces(path.read_bytes(), 2) is not None
    _same(_whole(path, monkeypatch), load.load_trace(path, processes=2))


@pytest.mark.parametrize("damage", ["cut-off", "bomb"])
def test_a_damaged_gzip_stream_gets_the_whole_read_error(tmp_path, monkeypatch, damage):
    path = tmp_path / "damaged.trace.json.gz"
    if damage == "cut-off":
        path.write_bytes(GRAPH.read_bytes()[:-5_000])
    else:  # the 10 MB text is past a bound of twice its 0.5 MB compressed size
        monkeypatch.setattr(pieces.inputs, "MAX_GUNZIP_FLOOR", 1 << 20)
        monkeypatch.setattr(pieces.inputs, "MAX_GUNZIP_RATIO", 2)
        path.write_bytes(GRAPH.read_bytes())
    assert pieces.decode_gzip_in_pieces(path.read_bytes(), 2) is None
    with pytest.raises(InputError) as caught:
        load.load_trace(path, processes=2)
    assert caught.value.code == "input.trace_truncated"
    assert ("gzip bomb" if damage == "bomb" else "truncated or corrupt") in caught.value.message
