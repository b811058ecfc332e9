"""The decoded form of a trace's JSON: typed (msgspec Structs) so that only the fields analyses read are
materialised; the large ``args`` of CPU ops and Python frames are skipped, not built."""

from __future__ import annotations

from typing import Annotated

import msgspec

# Microseconds. A duration is never negative and never longer than ~115 days; a timestamp is finite and bounded, so
# sums over millions of events stay finite (1.7e308 or -5 in a trace is damage, refused as not a trace).
Duration = Annotated[float, msgspec.Meta(ge=0, le=1e13)]
Timestamp = Annotated[float, msgspec.Meta(ge=-1e18, le=1e18)]
Id = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


class Args(msgspec.Struct, gc=False):
    correlation: Id | None = None


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Id | str = 0
    tid: Id | str = 0
    ts: Timestamp = 0.0
    dur: Duration = 0.0
    args: Args | None = None


class DistributedInfo(msgspec.Struct, gc=False):
    rank: Annotated[int, msgspec.Meta(ge=0, le=1 << 20)] | None = None
    world_size: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] | None = None


class TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[Event]
    distributedInfo: DistributedInfo | None = None


DECODER = msgspec.json.Decoder(TraceFile | list[Event])
