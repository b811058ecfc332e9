"""op_nesting (vectorised) against the per-op stack walk it replaced, kept here as the oracle: random ops on several
threads with shared starts, zero lengths, children that overrun their parents and recursion by name."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sgl_diffusion_bench.trace.model import Events
from sgl_diffusion_bench.trace.nesting import op_nesting


def stack_walk(ops: Events) -> tuple[list[float], list[bool]]:
    own, recursive = [0.0] * len(ops), [False] * len(ops)
    by_thread: dict[int, list[int]] = {}
    for i, thread in enumerate(ops.thread):
        by_thread.setdefault(thread, []).append(i)
    for rows in by_thread.values():
        rows.sort(key=ops.dur.__getitem__, reverse=True)
        rows.sort(key=ops.ts.__getitem__)
        stack: list[tuple[int, float]] = []
        open_names: dict[int, int] = {}
        for i in rows:
            start, length, name = ops.ts[i], ops.dur[i], ops.name[i]
            while stack and stack[-1][1] <= start:
                open_names[ops.name[stack.pop()[0]]] -= 1
            end = start + length
            if stack:
                parent, parent_end = stack[-1]
                if end > parent_end:
                    length, end = parent_end - start, parent_end
                own[parent] -= length
            own[i] += length
            recursive[i] = open_names.get(name, 0) > 0
            open_names[name] = open_names.get(name, 0) + 1
            stack.append((i, end))
    return [max(v, 0.0) for v in own], recursive


def table(rows: list[tuple[int, int, int, int]]) -> Events:
    """(thread, start, length, name) rows on a coarse grid, so ties and exact touches are common."""
    return Events(name=[r[3] for r in rows], ts=[float(r[1]) for r in rows], dur=[float(r[2]) for r in rows],
                  thread=[r[0] for r in rows], kind=[], correlation=[])


ROWS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 25), st.integers(0, 3)),
                max_size=60)


@settings(max_examples=400, deadline=None)
@given(ROWS, st.booleans())
def test_vectorised_nesting_equals_the_stack_walk(rows, profiler_order):
    if profiler_order:  # each thread's ops by start, longer first: the order a profiler writes (no sort needed)
        rows = sorted(rows, key=lambda r: (r[0], r[1], -r[2]))
    ops = table(rows)
    own, recursive = op_nesting(ops)
    expected_own, expected_recursive = stack_walk(ops)
    assert recursive.tolist() == expected_recursive
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(own.tolist(), expected_own, strict=True))


def test_a_child_cut_at_its_parents_end_closes_there_for_the_ops_after_it():
    # P [0,10] holds C [5,12] (cut to 10); N starts at 11, after P and the cut C: a top-level op, not C's child.
    ops = table([(0, 0, 10, 0), (0, 5, 7, 1), (0, 11, 2, 1)])
    own, recursive = op_nesting(ops)
    assert own.tolist() == [5.0, 5.0, 2.0] and recursive.tolist() == [False, False, False]


def test_an_empty_table_has_no_rows():
    own, recursive = op_nesting(table([]))
    assert own.size == recursive.size == 0
