"""How the CPU ops of a trace nest on their threads: each op's self time and whether it recurses by name (the per-op
stack walk this replaced stays in the tests as the oracle)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from .model import Events


def op_nesting(ops: Events) -> tuple[np.ndarray, np.ndarray]:
    """Per op (numpy arrays in the table's order): its self time (its duration less the time of the ops nested
    inside it on the same thread, as torch.profiler's "self CPU"), so ``aten::conv2d > aten::convolution > ...``
    counts the convolution's time once, under the innermost name; and whether it runs inside an op of its own name
    (``aten::sum`` calls another ``aten::sum``), so a name's inclusive time counts such recursion once. A child that
    overruns its parent (rounded timestamps) is cut at the parent's end: on each thread the self times add up to the
    union of the op intervals.

    Vectorised over the ~200,000 ops of a large trace (a per-op stack walk took most of the analysis). In start order
    (the longer first on a tie), an op's parent is the latest earlier op on its thread still open at its start; the
    open count is its depth, and the parent is the latest earlier op one level up. Cutting a child to its parent's end
    can close it sooner and so change later ops' parents: the structure is recomputed until the ends hold still (one
    extra pass where nothing overruns)."""
    import numpy as np
    count = len(ops)
    ts, dur = np.asarray(ops.ts, dtype=np.float64), np.asarray(ops.dur, dtype=np.float64)
    threads = np.asarray(ops.thread, dtype=np.int64)
    order = _start_order(ts, dur, threads)
    start, length, thread = ts[order], dur[order], threads[order]
    name = np.asarray(ops.name, dtype=np.int64)[order]
    end = cut_end = start + length
    for _ in range(count + 1):  # one pass where nothing overruns, another per round of cuts; bounded regardless
        depth, parent = _depth_and_parent(start, cut_end, thread)
        new_end = end.copy()
        for level in range(1, int(depth.max(initial=0)) + 1):  # parents first: a cut passes down the chain
            rows = np.flatnonzero(depth == level)
            new_end[rows] = np.minimum(end[rows], new_end[parent[rows]])
        if np.array_equal(new_end, cut_end):
            break
        cut_end = new_end
    nested = parent >= 0
    cut = nested & (end > cut_end)
    own_length = np.where(cut, cut_end - start, length)  # uncut: the duration itself, not end - start (rounding)
    own = own_length.copy()
    np.subtract.at(own, parent[nested], own_length[nested])  # in start order, as the stack walk took them
    recursive = np.zeros(count, dtype=bool)
    ancestor = parent.copy()
    while (live := np.flatnonzero(ancestor >= 0)).size:
        recursive[live] |= name[ancestor[live]] == name[live]
        ancestor[live] = parent[ancestor[live]]
    own_by_row, recursive_by_row = np.empty(count), np.empty(count, dtype=bool)
    own_by_row[order], recursive_by_row[order] = np.maximum(own, 0.0), recursive
    return own_by_row, recursive_by_row


def _start_order(ts, dur, threads):
    """Ops by (thread, start, longer first), ties in table order. A profiler writes each thread's ops in start order,
    so the table is often in this order already, which a linear check finds without the sort."""
    import numpy as np
    same_thread = threads[1:] == threads[:-1]
    same_start = ts[1:] == ts[:-1]
    in_order = (threads[1:] > threads[:-1]) | same_thread & ((ts[1:] > ts[:-1]) | same_start & (dur[1:] <= dur[:-1]))
    return np.arange(ts.size) if in_order.all() else np.lexsort((-dur, ts, threads))


def _depth_and_parent(start, end, thread):
    """For ops sorted by (thread, start, longer first): how many earlier ops of the thread are open at each start
    (an op ending exactly there is closed; a zero-length op is closed before a later op of the same start), and the
    latest earlier op one level up (-1 at depth 0).

    Per thread, an op's depth is its position less the ends before its start: the ends strictly before it, and
    those exactly at it of ops earlier in the order (a stable sort of the ends keeps that order within a tie)."""
    import numpy as np
    count = start.size
    index = np.arange(count)
    depth = np.empty(count, dtype=np.int64)
    bounds = np.flatnonzero(np.concatenate(([True], thread[1:] != thread[:-1], [True])))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        starts, size = start[lo:hi], hi - lo
        by_end = np.argsort(end[lo:hi], kind="stable")
        ends = end[lo:hi][by_end]
        before = np.searchsorted(ends, starts, "left")
        tied = np.flatnonzero(ends[np.minimum(before, size - 1)] == starts)  # an end exactly at the start
        if tied.size:  # (end, position) pairs before (start, position): a tie run counts its earlier positions
            run = np.concatenate(([0], np.cumsum(ends[1:] != ends[:-1])))
            pairs = run * (size + 1) + by_end
            before[tied] = np.searchsorted(pairs, run[before[tied]] * (size + 1) + tied, "left")
        depth[lo:hi] = np.arange(size) - before
    key = depth * (count + 1) + index  # ops by (depth, position); the parent is the last key below (depth - 1, i)
    ranked = np.sort(key)
    found = np.searchsorted(ranked, (depth - 1) * (count + 1) + index) - 1
    parent = np.where(depth > 0, ranked[np.maximum(found, 0)] % (count + 1), -1)
    return depth, parent
