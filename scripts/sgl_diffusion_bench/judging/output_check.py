"""Outputs are opened, not only hashed: a file counts as a run's output only when it decodes as the media kind its
task produces, at the size the request asked for (and, for a video, with the frames it asked for). A 0-byte,
truncated or foreign file then makes the request invalid with a reason naming the file, in the campaign runner and in
judge_run alike (both reach this through request_path.judge_request).

Images decode with Pillow and videos with PyAV, both installed with the engine; where neither can load (judge_run in
a bare environment) the file is not taken on trust: the reason says what to install.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from .. import argv_tokens
from . import media

DECODED_KINDS = ("image", "video")


@dataclasses.dataclass(frozen=True)
class RequestedShape:
    """What the request asked for; None where it left the choice to the engine (then that figure is not checked)."""

    width: int | None = None
    height: int | None = None
    num_frames: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return dataclasses.asdict(self)


NOT_REQUESTED = RequestedShape()  # a request that left every figure to the engine: only decodability is checked


@dataclasses.dataclass(frozen=True)
class Decoded:
    kind: str
    width: int
    height: int
    frames: int | None = None


class OutputProblem(Exception):
    """One file that does not count; ``code`` is the reason's code (artifacts.*)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def requested_shape(argv: Sequence[str]) -> RequestedShape:
    """The last --width/--height/--num-frames of a request's argv (the engine takes the last one too)."""
    found: dict[str, int | None] = {"width": None, "height": None, "num_frames": None}
    for name, values, _tokens in argv_tokens.split_flags(list(argv)):
        key = name.lstrip("-").replace("-", "_")
        if key in found and values:
            try:
                found[key] = int(values[-1])
            except ValueError:
                found[key] = None  # the engine refuses it itself; nothing to check the file against
    return RequestedShape(**found)


def _kind_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    return next((kind for kind, suffixes in media.SUFFIXES.items() if suffix in suffixes), None)


def decode(path: Path) -> Decoded | None:
    """The file's media shape; None for kinds this module does not decode (audio, meshes). Raises OutputProblem."""
    kind = _kind_of(path)
    if kind not in DECODED_KINDS:
        return None
    size = path.stat().st_size
    if size == 0:
        raise OutputProblem("artifacts.empty_output", f"{path} is empty (0 bytes)")
    return _decode_image(path) if kind == "image" and path.suffix.lower() != ".gif" else _decode_video(path)


def _decode_image(path: Path) -> Decoded:
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise OutputProblem("artifacts.no_decoder", f"cannot open {path}: Pillow is not installed here "
                                                    "(pip install pillow)") from None
    try:
        with Image.open(path) as image:
            image.load()  # decodes every pixel: a truncated file fails here, not at open
            return Decoded("image", image.width, image.height)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise OutputProblem("artifacts.undecodable_output",
                            f"{path} ({path.stat().st_size} bytes) does not decode as an image: {exc}") from None


def _decode_video(path: Path) -> Decoded:
    try:
        import av
    except ImportError:
        raise OutputProblem("artifacts.no_decoder", f"cannot open {path}: PyAV is not installed here "
                                                    "(pip install av)") from None
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise OutputProblem("artifacts.undecodable_output", f"{path} holds no video stream")
            size, count = None, 0  # every frame decoded (a truncated file fails here), none kept in memory
            for frame in container.decode(video=0):
                size, count = size or (frame.width, frame.height), count + 1
    except av.FFmpegError as exc:
        raise OutputProblem("artifacts.undecodable_output",
                            f"{path} ({path.stat().st_size} bytes) does not decode as a video: {exc}") from None
    if size is None:
        raise OutputProblem("artifacts.undecodable_output", f"{path} decodes to no video frame")
    return Decoded("video", size[0], size[1], count)


def check_output(path: Path, requested: RequestedShape) -> dict[str, Any] | None:
    """The decoded shape of one output (None for kinds not decoded); raises OutputProblem when it does not count."""
    decoded = decode(path)
    if decoded is None:
        return None
    wrong = [f"{name} {got} (requested {want})" for name, got, want in
             (("width", decoded.width, requested.width), ("height", decoded.height, requested.height),
              ("frames", decoded.frames, requested.num_frames if decoded.kind == "video" else None))
             if want is not None and got != want]
    if wrong:
        article = "an" if decoded.kind[0] in "aeiou" else "a"
        raise OutputProblem("artifacts.output_shape", f"{path} is {article} {decoded.kind} of the wrong shape: "
                                                      + ", ".join(wrong))
    return {"kind": decoded.kind, "width": decoded.width, "height": decoded.height, "frames": decoded.frames}
