"""A real LiveKit call, deployed as users deploy: a worker (``python agent.py start``), a
livekit-server and a caller participant, all in one private network namespace.

- ``agent.py``: the application, as a user writes it (no tracing code); its model edges come
  from ``scripted.py`` the way a provider plugin would, and its last lines hand the process to
  ``measure.py``, the test's instruments (not tracing), when the test asks for them.
- ``caller.py``: a ``livekit.rtc`` participant in its own process that speaks (espeak-ng) and
  times every frame it hears.
- ``tones.py``: which agent's voice a frame is (each agent's TTS is a tone of its own).
"""
