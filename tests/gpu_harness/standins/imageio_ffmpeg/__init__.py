"""Stand-in for imageio-ffmpeg (GPU test harness): its wheel bundles a ~27 MB ffmpeg binary that does not fit the
device carry limit beside sglang. sglang 0.5.23's entrypoints/utils.py imports it at load and calls get_ffmpeg_exe()
to write a video (image runs never do): that gets ../bin/ffmpeg, which writes the frames with the machine's OpenCV."""

import os

_FFMPEG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "ffmpeg")


def get_ffmpeg_exe():
    return _FFMPEG
