"""The documents of the tools' own folders (a sweep's sweep.json, each shard's state.json and result, the Slurm job
list, an evidence folder's evidence.json) are read like any user input: a FIFO put in their place cannot block the
command, and a document of the wrong shape or with non-finite numbers is refused or ignored, never a traceback."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from sgl_diffusion_bench import contract
from sgl_diffusion_bench.evidence import manifest as evidence_manifest
from sgl_diffusion_bench.sweep import driver, state as sweep_state
from sgl_diffusion_bench.sweep.executors import slurm


@contextlib.contextmanager
def within(seconds: int):
    """Fail instead of hanging: a read that blocks on a FIFO is interrupted by SIGALRM."""
    def expired(*_):
        raise AssertionError(f"blocked for {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def test_a_fifo_in_place_of_a_folder_document_is_refused_at_once(tmp_path):
    _fifo(tmp_path / "ev" / evidence_manifest.NAME)
    _fifo(tmp_path / "sw" / sweep_state.MARK)
    _fifo(sweep_state.shard_dir(tmp_path / "sw", "s0") / "state.json")
    _fifo(tmp_path / "sw" / slurm.JOBS_FILE)
    with within(10):
        with pytest.raises(contract.InputError) as refused:
            evidence_manifest.load(tmp_path / "ev")
        assert refused.value.code == "evidence.manifest_unreadable" and "not a regular file" in refused.value.message
        with pytest.raises(contract.UsageError) as not_sweep:
            driver.spec_of_folder(tmp_path / "sw")
        assert not_sweep.value.code == "sweep.not_a_sweep_folder"
        assert sweep_state.read_state(tmp_path / "sw", "s0") is None
        assert slurm.recorded_jobs(tmp_path / "sw") == {}


@pytest.mark.parametrize("text", ["[1, 2]", '{"name": "x"}', '{"spec": [1]}', "{", '{"spec": {"a": NaN}}'])
def test_a_sweep_mark_of_the_wrong_shape_is_not_a_sweep_folder(tmp_path, text):
    (tmp_path / sweep_state.MARK).write_text(text)
    with pytest.raises(contract.UsageError) as refused:
        driver.spec_of_folder(tmp_path)
    assert refused.value.code == "sweep.not_a_sweep_folder"


def test_a_state_or_job_list_that_is_no_object_reads_as_absent_and_a_foreign_mark_refuses_the_folder(tmp_path):
    state = sweep_state.shard_dir(tmp_path, "s0") / "state.json"
    state.parent.mkdir(parents=True)
    for text in ("[1]", '{"pid": NaN}', '{"pid": ' + "9" * 5001 + "}"):
        state.write_text(text)
        assert sweep_state.read_state(tmp_path, "s0") is None
    state.write_text('{"status": "done"}')
    assert sweep_state.read_state(tmp_path, "s0") == {"status": "done"}
    (tmp_path / slurm.JOBS_FILE).write_text("[1, 2]")
    assert slurm.recorded_jobs(tmp_path) == {}
    (tmp_path / sweep_state.MARK).write_text("[1, 2]")
    with pytest.raises(contract.UsageError) as refused:
        sweep_state.prepare(tmp_path, "mine", {})
    assert refused.value.code == "sweep.folder_not_ours"
