"""Load generation: a seeded trace of arrival times (Poisson at a request rate, open loop) or a closed loop of N
requests in flight, sent over HTTP to a server with aiohttp, one result per request.

The trace is built once per load point and replayed unchanged against every block of both arms: the same arrival
times and the same requests in the same order. The request body and the success rule follow the engine's own
``bench_serving``: an image (``async_request_image_sglang``: POST /v1/images/generations, HTTP 200 with outputs =
success; the latency is the client's, from send to the parsed response), an image edit (the same, as a multipart
form to POST /v1/images/edits with the input image) or a video (``async_request_video_sglang``:
POST /v1/videos makes a job, polled at GET /v1/videos/<id> until it is completed (success) or failed; the latency
runs from the POST to the poll that sees it completed, so it is at most VIDEO_POLL_S late, where the engine's own
client polls once a second). A completed video's bytes are fetched after its latency is taken, for output identity.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import hashlib
import itertools
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import contract
from ..engine.request_manifest import RequestSpec

REQUEST_TIMEOUT_S = 600.0
ERROR_CHARS = 300
IMAGES = "/v1/images/generations"
EDITS = "/v1/images/edits"
VIDEOS = "/v1/videos"
VIDEO_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class LoadPoint:
    """One load: an open-loop request rate (requests/s) or a closed-loop concurrency."""

    kind: str  # request_rate | concurrency
    value: float

    @property
    def label(self) -> str:
        return f"rate {self.value:g}/s" if self.kind == "request_rate" else f"concurrency {int(self.value)}"

    @property
    def key(self) -> str:
        return f"rate-{self.value:g}" if self.kind == "request_rate" else f"conc-{int(self.value)}"


@dataclasses.dataclass(frozen=True)
class Trace:
    """What one load point sends: request i is ``specs[indices[i]]`` sent at ``arrivals_s[i]`` (open loop; None for
    a closed loop, where a request goes as soon as one of the N in flight returns). ``indices`` None: a closed loop
    for a duration, request i being ``specs[i % len(specs)]`` for as long as the duration lasts."""

    point: LoadPoint
    indices: tuple[int, ...] | None
    arrivals_s: tuple[float, ...] | None
    seed: int
    planned: int | None = None  # None: a closed loop for a duration sends what fits

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.point.kind, "value": self.point.value, "seed": self.seed,
                "planned_requests": self.planned,
                "order": "manifest order, cycling",
                "arrivals_s": None if self.arrivals_s is None else list(self.arrivals_s)}


def build_trace(point: LoadPoint, n_specs: int, *, requests: int | None, duration_s: float | None,
                seed: int) -> Trace:
    """The seeded trace of one load point: Poisson inter-arrival times (exponential, mean 1/rate) for ``requests``
    requests or until ``duration_s``; request specs taken in manifest order, cycling."""
    rng = random.Random(f"{seed}:{point.key}")
    if point.kind == "request_rate":
        arrivals, t = [], 0.0
        while True:
            t_next = t + rng.expovariate(point.value) if arrivals else 0.0
            if (requests is not None and len(arrivals) >= requests) or (
                    requests is None and duration_s is not None and t_next > duration_s):
                break
            arrivals.append(t_next)
            t = t_next
        count = len(arrivals)
        return Trace(point, tuple(i % n_specs for i in range(count)), tuple(arrivals), seed, count)
    if requests is None:  # closed loop for a duration: the count is what fits
        return Trace(point, None, None, seed, None)
    return Trace(point, tuple(i % n_specs for i in range(requests)), None, seed, requests)


@dataclasses.dataclass
class RequestResult:
    """One request as the client saw it (times in seconds, as the engine's bench_serving reports them)."""

    index: int
    request_id: str
    shape: str
    scheduled_s: float | None
    start_s: float
    latency: float
    success: bool
    error: str = ""
    output_count: int = 0
    output_sha256: str | None = None
    inference_time_s: float | None = None  # the server's own figure, when the response carries one
    peak_memory_mb: float | None = None

    @property
    def queue_delay_s(self) -> float | None:
        """How late the request went out against its arrival time (the client's own lag; open loop only)."""
        return None if self.scheduled_s is None else max(self.start_s - self.scheduled_s, 0.0)

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["queue_delay_s"] = self.queue_delay_s
        doc["server_overhead_s"] = (None if self.inference_time_s is None or not self.success
                                    else max(self.latency - self.inference_time_s, 0.0))
        return doc


def _aiohttp():
    try:
        import aiohttp
    except ImportError:
        raise contract.PreconditionError(
            "serving.no_http_client", "aiohttp is not installed in this interpreter",
            "pip install 'sglang-diffusion-benchmark-profile[serving]' (aiohttp; sglang's serving path needs it "
            "too)") from None
    return aiohttp


def _outputs(body: Any) -> tuple[int, str | None]:
    """How many outputs the response holds and the sha256 of their decoded bytes, in order (None when the
    response carries no inline data)."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return 0, None
    digest, inline = hashlib.sha256(), False
    for item in data:
        encoded = item.get("b64_json") if isinstance(item, dict) else None
        if isinstance(encoded, str):
            digest.update(base64.b64decode(encoded))
            inline = True
    return len(data), digest.hexdigest() if inline else None


async def _http_error(response: Any) -> str:
    return f"HTTP {response.status}: {(await response.text())[:ERROR_CHARS]}"


def _server_figures(result: RequestResult, body: dict[str, Any]) -> None:
    """The server's own figures, where the response carries them."""
    for name in ("inference_time_s", "peak_memory_mb"):
        value = body.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(result, name, float(value))


def _form(fields: dict[str, Any], file_field: str, image: tuple[str, bytes]) -> Any:
    """``fields`` as a multipart form, with the input image as the file ``file_field``."""
    form = _aiohttp().FormData()
    for name, value in fields.items():
        form.add_field(name, str(value))
    form.add_field(file_field, image[1], filename=image[0], content_type="application/octet-stream")
    return form


async def _image_request(session: Any, url: str, spec: RequestSpec, result: RequestResult,
                         image: tuple[str, bytes] | None = None) -> float | None:
    """One POST whose response holds the images (an edit: the same fields as a multipart form, with the input
    image as ``image``); the latency ends once it is parsed (None: now)."""
    body = {"json": spec.payload()} if image is None else {"data": _form(spec.payload(), "image", image)}
    async with session.post(url, **body) as response:
        if response.status != 200:
            result.error = await _http_error(response)
            return None
        body = await response.json()
        result.output_count, result.output_sha256 = _outputs(body)
        result.success = result.output_count > 0
        if not result.success:
            result.error = "HTTP 200 without outputs"
        _server_figures(result, body)
    return None


def _job_body(spec: RequestSpec, image: tuple[str, bytes] | None) -> dict[str, Any]:
    """The job's JSON body, or with an input image the same fields as a multipart form (input_reference: the file)."""
    if image is None:
        return {"json": spec.video_payload()}
    return {"data": _form(spec.video_payload(), "input_reference", image)}


async def _video_job(session: Any, url: str, spec: RequestSpec, result: RequestResult,
                     image: tuple[str, bytes] | None = None) -> float | None:
    """A job made by one POST and polled until it is completed or failed; the latency ends at the poll that saw it
    completed (returned), before the video's bytes are fetched for their hash."""
    async with session.post(url, **_job_body(spec, image)) as response:
        if response.status != 200:
            result.error = await _http_error(response)
            return None
        job = (await response.json()).get("id")
    if not job:
        result.error = "HTTP 200 without a job id"
        return None
    while True:
        async with session.get(f"{url}/{job}") as response:
            if response.status != 200:
                result.error = await _http_error(response)
                return None
            body = await response.json()
        if body.get("status") == "failed":
            result.error = f"job failed: {body.get('error')}"[:ERROR_CHARS]
            return None
        if body.get("status") == "completed":
            done_at = time.perf_counter()
            break
        await asyncio.sleep(VIDEO_POLL_S)
    result.success, result.output_count = True, int(body.get("num_outputs") or 1)
    _server_figures(result, body)
    async with session.get(f"{url}/{job}/content") as response:
        if response.status == 200:
            result.output_sha256 = hashlib.sha256(await response.read()).hexdigest()
    return done_at


async def _send(session: Any, url: str, index: int, spec: RequestSpec, scheduled_s: float | None,
                origin: float, exchange: Callable[..., Any]) -> RequestResult:
    start = time.perf_counter()
    result = RequestResult(index, spec.request_id, spec.shape, scheduled_s, start - origin, 0.0, False)
    done_at = None
    try:
        done_at = await exchange(session, url, spec, result)
    except Exception as exc:  # a refused connection, a timeout, a reset: the request failed, the run goes on
        result.success, result.error = False, f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
    result.latency = (done_at or time.perf_counter()) - start
    return result


async def _run(base_url: str, trace: Trace, specs: Sequence[RequestSpec], duration_s: float | None,
               on_result: Callable[[RequestResult], None] | None, endpoint: str,
               image: Path | None) -> tuple[list[RequestResult], float]:
    aiohttp = _aiohttp()
    url = base_url + endpoint
    exchange = functools.partial(_video_job if endpoint == VIDEOS else _image_request,
                                 image=None if image is None else (image.name, image.read_bytes()))
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        origin = time.perf_counter()

        async def send(i: int, spec: RequestSpec, scheduled_s: float | None) -> RequestResult:
            result = await _send(session, url, i, spec, scheduled_s, origin, exchange)
            if on_result is not None:
                on_result(result)
            return result
        if trace.arrivals_s is not None:
            async def at(i: int) -> RequestResult:
                await asyncio.sleep(max(trace.arrivals_s[i] - (time.perf_counter() - origin), 0.0))
                return await send(i, specs[trace.indices[i]], trace.arrivals_s[i])
            results = list(await asyncio.gather(*(at(i) for i in range(len(trace.indices)))))
        else:
            position = iter(range(len(trace.indices))) if trace.indices is not None else itertools.count()
            results = []

            async def worker() -> None:
                for i in position:
                    if duration_s is not None and time.perf_counter() - origin >= duration_s:
                        return
                    spec = specs[trace.indices[i] if trace.indices is not None else i % len(specs)]
                    results.append(await send(i, spec, None))
            await asyncio.gather(*(worker() for _ in range(int(trace.point.value))))
            results.sort(key=lambda r: r.index)
        return results, time.perf_counter() - origin


def run_trace(base_url: str, trace: Trace, specs: Sequence[RequestSpec], duration_s: float | None = None,
              on_result: Callable[[RequestResult], None] | None = None, endpoint: str = IMAGES,
              image: Path | None = None) -> tuple[list[RequestResult], float]:
    """Send the trace to ``base_url``; the per-request results and the block's wall time (first send to last
    response), the ``duration`` of the engine's bench_serving. ``on_result`` sees each result as it completes (what
    a Ctrl-C in the middle of a block keeps)."""
    return asyncio.run(_run(base_url, trace, specs, duration_s, on_result, endpoint, image))


def warm(base_url: str, specs: Sequence[RequestSpec], count: int, endpoint: str = IMAGES,
         image: Path | None = None) -> list[RequestResult]:
    """``count`` sequential requests (cycling over every shape first), kept out of the statistics."""
    if count <= 0:
        return []
    distinct = {s.shape: i for i, s in reversed(list(enumerate(specs)))}
    order = sorted(distinct.values())
    indices = tuple(order[i % len(order)] for i in range(max(count, len(order))))
    results, _ = run_trace(base_url, Trace(LoadPoint("concurrency", 1), indices, None, 0), specs, endpoint=endpoint,
                           image=image)
    return results
