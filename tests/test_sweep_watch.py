"""What a running sweep says (issue 45): read from the sweep folder as the worker writes it, one line per shard
event (started, each measured cell, done, failed) with elapsed time and an ETA, and a line at least every
QUIET_S while nothing happens. A fake clock drives it; the folder's files are the ones the worker writes."""

from __future__ import annotations

from pathlib import Path

from sgl_diffusion_bench.sweep import state as sweep_state
from sgl_diffusion_bench.sweep import watch


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def running(folder: Path, shard_id: str, attempt: int, log: str = "") -> None:
    sweep_state.write_state(folder, shard_id, {"id": shard_id, "status": "running", "attempt": attempt,
                                               "reason": None})
    (sweep_state.shard_dir(folder, shard_id) / f"attempt-{attempt}.stderr.log").write_text(log)


def finished(folder: Path, shard_id: str, attempt: int, status: str, wall_s: float, reason: str | None = None):
    sweep_state.write_state(folder, shard_id, {"id": shard_id, "status": status, "attempt": attempt,
                                               "reason": reason, "wall_s": wall_s})


def test_each_shard_event_is_one_line_with_elapsed_and_an_eta_from_the_estimates(tmp_path):
    clock, said = Clock(), []
    finished(tmp_path, "b", 1, "failed", 5.0, "an earlier run's failure")  # what an earlier run left: not said
    watcher = watch.Watcher(tmp_path, {"a": 100.0, "b": 100.0}, slots=1, say=said.append, clock=clock)
    watcher.poll()
    assert said == []
    running(tmp_path, "a", 1, "[progress] engine e1: loading the model ...\n")
    clock.now += 1
    watcher.poll()
    assert said == ["a: started (attempt 1) [0 done, 0 failed, 1 running, 1 pending; elapsed 0:01, "
                    "ETA ~3:20]"]
    log = sweep_state.shard_dir(tmp_path, "a") / "attempt-1.stderr.log"
    with log.open("a") as handle:
        handle.write("[cell 1/2] run (single run) starting\n[cell 1/2] run: VALID after 0.0 s e2e 21.7 ms\n[cell 2")
    clock.now += 1
    watcher.poll()
    assert said[-1].startswith("a: cell 1/2 run: VALID after 0.0 s e2e 21.7 ms [0 done")
    with log.open("a") as handle:  # the rest of a line written in two pieces
        handle.write("/2] run: INVALID after 0.1 s engine.timeout\n")
    clock.now += 1
    watcher.poll()
    assert said[-1].startswith("a: cell 2/2 run: INVALID after 0.1 s engine.timeout [")
    # quiet for QUIET_S: one line naming what the running shard does (its latest line)
    clock.now += watch.QUIET_S
    watcher.poll()
    assert said[-1].startswith("waiting; a: [cell 2/2] run: INVALID") and len(said) == 4
    watcher.poll()
    assert len(said) == 4  # no second line within QUIET_S
    finished(tmp_path, "a", 1, "done", 50.0)
    clock.now += 1
    watcher.poll()
    # a took half its estimate: b's 100 s estimate becomes 50 s
    assert said[-1] == (f"a: done in 50 s [1 done, 0 failed, 0 running, 1 pending; elapsed "
                        f"{watch.clock_text(clock.now - 1000)}, ETA ~0:50]")
    running(tmp_path, "b", 2)
    finished(tmp_path, "b", 2, "failed", 3.0, "the bench exited 1")  # started and over between two polls
    clock.now += 1
    watcher.poll()
    assert said[-2].startswith("b: started (attempt 2)")
    assert said[-1] == (f"b: failed in 3 s: the bench exited 1 [1 done, 1 failed, 0 running, 0 pending; "
                        f"elapsed {watch.clock_text(clock.now - 1000)}, ETA ~0:00]")


def test_the_eta_spreads_the_work_left_over_the_slots():
    clock = Clock()
    watcher = watch.Watcher(Path("/nonexistent"), {"a": 60.0, "b": 60.0, "c": 60.0, "d": 60.0}, slots=2,
                            say=lambda _: None, clock=clock)
    assert watcher.eta_s() == 120.0
    watcher.poll()  # no folder, no state: nothing read, nothing said
    assert watch.clock_text(3725) == "1:02:05" and watch.clock_text(65) == "1:05"


def test_watching_polls_beside_the_work_and_once_after_it(tmp_path):
    said = []
    watcher = watch.Watcher(tmp_path, {"a": 10.0}, slots=1, say=said.append)

    def work():
        running(tmp_path, "a", 1)
        finished(tmp_path, "a", 1, "done", 0.5)
        return {"ran": True}

    assert watch.watching(watcher, work) == {"ran": True}
    assert [line.split(" [")[0] for line in said] == ["a: started (attempt 1)", "a: done in 0 s"]


def test_a_quiet_line_names_three_running_shards_and_counts_the_rest(tmp_path):
    clock, said = Clock(), []
    ids = [f"s{n}" for n in range(5)]
    watcher = watch.Watcher(tmp_path, {i: 60.0 for i in ids}, slots=5, say=said.append, clock=clock)
    for shard_id in ids:
        running(tmp_path, shard_id, 1, f"[progress] engine e1: loading {shard_id}\n")
    watcher.poll()
    clock.now += watch.QUIET_S
    watcher.poll()
    assert said[-1].startswith("waiting; s0: engine e1: loading s0; s1: engine e1: loading s1; s2: engine "
                               "e1: loading s2; 2 more running [")


def test_a_watcher_line_on_stderr_carries_one_tag(tmp_path, capsys):
    watcher = watch.Watcher(tmp_path, {"a": 10.0}, slots=1, clock=Clock())
    running(tmp_path, "a", 1, "")
    watcher.poll()
    assert capsys.readouterr().err.startswith("[sweep] a: started (attempt 1) [0 done, 0 failed, 1 running")
