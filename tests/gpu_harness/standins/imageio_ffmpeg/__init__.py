"""Import-only stand-in for imageio-ffmpeg (GPU test harness): its wheel bundles a ~27 MB ffmpeg binary that does not
fit the device carry limit beside sglang. sglang 0.5.23's entrypoints/utils.py imports it at load and calls
get_ffmpeg_exe() only to mux video/audio; image runs never do. Any use raises."""


def get_ffmpeg_exe():
    raise NotImplementedError("imageio-ffmpeg is not installed (GPU test harness stand-in); video output needs the "
                              "real package")
