"""A real-time audio stream's own timeline, read in a process that a busy machine delays.

The agent's STT reports the end of speech on it (as a provider does: LiveKit adds a transcript's
``end_time`` to when the input started), and the caller times what it hears on it: WebRTC hands
over a frame every 10 ms, whatever the jitter buffer put in it, so a frame read late was
there on time.
"""

from __future__ import annotations

import time
from collections import deque


class Timeline:
    """When each sample of a real-time stream came in, on the audio's own timeline: not when this
    process got to the frame, which a busy machine delays by up to hundreds of ms. The stream's
    start is the earliest any frame of the last ``window`` seconds implies: a frame read late
    implies a later one, the frames that came in on time the true one."""

    def __init__(self, window: float = 1.0) -> None:
        self.window = window
        self.samples = 0
        self._starts: deque[tuple[float, float]] = deque()  # (read at, the start it implies)

    def add(self, count: int, rate: int) -> float:
        """Take ``count`` samples read now; the wall-clock time of the first of them."""
        now = time.time()
        self.samples += count
        self._starts.append((now, now - self.samples / rate))
        while self._starts[0][0] < now - self.window:
            self._starts.popleft()
        return min(start for _, start in self._starts) + (self.samples - count) / rate
