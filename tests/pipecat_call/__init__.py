"""A real Pipecat call over WebRTC, deployed as users deploy (issue 43): Pipecat's development
runner (``python bot.py -t webrtc``: FastAPI, uvicorn, ``SmallWebRTCTransport`` on aiortc) and an
aiortc caller, both in one private network namespace beside the suite's Jaeger.

- ``bot.py``: the application, as a user writes it (no tracing code); its STT, model and TTS come
  from ``scripted.py`` the way a provider's service would, and its last lines hand the process to
  ``measure.py``, the test's instruments (not tracing), when the test asks for them.
- ``caller.py``: an aiortc peer in its own process that speaks (espeak-ng) and times every frame
  it hears, attributed to a node by its tone (``livekit_call/tones.py``).
- ``deployment.py``: the runner started, the calls made, SIGTERM, what reached Jaeger.
"""
