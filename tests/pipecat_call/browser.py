"""The caller as a real browser: Debian's Chromium, headless, driven by playwright; one call per command.

Run inside the caller's network namespace as ``python browser.py OFFER_URL WORKDIR`` (the same JSON
lines as ``caller.py``). Per call, a Chromium of its own: its microphone is Chromium's fake capture
playing a WAV file (:data:`LEAD_SECONDS` of silence while the greeting plays, then ``speech``
spoken by espeak-ng), and ``browser.html``, served at the runner's own origin, makes the offer and
answer Pipecat's client page makes. What it hears is timed after NetEq (the browser's jitter
buffer, the one the heard-delay model describes): an AudioWorklet on the remote track names the node
whose tone each 128-sample quantum carries, and the page stamps each change with the wall clock when
its message arrives (Chromium's fake output device plays ~38 ms after that; the figures here use
the message). Chromium's own ``getStats()`` (``inbound-rtp``: ``jitterBufferDelay`` and
``jitterBufferEmittedCount``, ``jitterBufferTargetDelay``, ``concealedSamples``, ``packetsLost``,
``jitter``) is read when the new node is first heard and at the end.

Nothing of the browser is set to meet the estimate: its jitter buffer is its own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
import wave
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from caller import FIRST, SAMPLE_RATE, SECOND, speech

PAGE = Path(__file__).with_name("browser.html")
LEAD_SECONDS = 3.0  # the fake microphone's silence before it speaks: the greeting plays meanwhile
TRAIL_SECONDS = 3.0
STEP_TIMEOUT_MS = 30_000
ENDED_AFTER_MS = 100  # a node not heard for this long stopped speaking (as caller.py's 5 frames)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def microphone(text: str, path: Path) -> tuple[float, float]:
    """The WAV the fake capture plays: silence, ``text``, silence (48 kHz mono 16-bit). Returns
    the seconds from its start to the first and past the last voiced sample."""
    samples = speech(text)
    voiced = np.flatnonzero(np.abs(samples) > 0.01 * 32767)
    lead, trail = (
        np.zeros(int(LEAD_SECONDS * SAMPLE_RATE), np.int16),
        np.zeros(int(TRAIL_SECONDS * SAMPLE_RATE), np.int16),
    )
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(np.concatenate([lead, samples, trail]).tobytes())
    return LEAD_SECONDS + voiced[0] / SAMPLE_RATE, LEAD_SECONDS + (voiced[-1] + 1) / SAMPLE_RATE


def changes(heard: list[list[Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """From the page's ``[wall ms, voice]`` changes: when each node was first heard, and when it
    stopped (the first change away from it that lasted :data:`ENDED_AFTER_MS`), in ns."""
    first: dict[str, int] = {}
    ended: dict[str, int] = {}
    for index, (at, voice) in enumerate(heard):
        if voice is not None and voice not in first:
            first[voice] = round(at * 1e6)
        for node in first:
            if node in ended or voice == node:
                continue
            back = next((t for t, v in heard[index + 1 :] if v == node), None)
            if back is None or back - at >= ENDED_AFTER_MS:
                ended[node] = round(at * 1e6)
    return first, ended


def call(url: str, workdir: Path, command: dict[str, Any], number: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    wav = workdir / f"microphone-{number}.wav"
    voice_from, voice_to = microphone(command["speech"], wav)
    result: dict[str, Any] = {"command": command, "browser": True}
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
        f"--unsafely-treat-insecure-origin-as-secure={origin}",
        "--disable-features=WebRtcHideLocalIpsWithMdns",
    ]
    heard: list[list[Any]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=args)
        try:
            page = browser.new_page()
            page.route(
                f"{origin}/caller",
                lambda route: route.fulfill(body=PAGE.read_text(), content_type="text/html"),
            )
            page.goto(f"{origin}/caller")
            started = page.evaluate("call()")
            result["pc_id"] = started["pc_id"]
            captured_ns = round(started["captured_ms"] * 1e6)
            result["speech_started_ns"] = captured_ns + round(voice_from * 1e9)
            result["end_of_speech_ns"] = captured_ns + round(voice_to * 1e9)
            page.wait_for_function(
                f"() => window.heard.some(h => h[1] === '{SECOND}')", timeout=STEP_TIMEOUT_MS, polling=10
            )
            page.evaluate("snapshot('first_heard')")
            page.wait_for_function(
                f"""() => {{
                    const i = window.heard.findIndex(h => h[1] === '{SECOND}');
                    const last = window.heard[window.heard.length - 1];
                    return i >= 0 && last[1] !== '{SECOND}' && Date.now() - last[0] > {ENDED_AFTER_MS * 2};
                }}""",
                timeout=STEP_TIMEOUT_MS,
                polling=50,
            )
            time.sleep(command.get("linger", 0.0))  # the caller stays on the line a while
            page.evaluate("hangUp()")
            heard = page.evaluate("window.heard")
            result["stats"] = page.evaluate("window.stats")
        except Exception as exc:  # reported to the test, which fails the call with it
            result["error"] = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                heard = page.evaluate("window.heard")
        finally:
            result["left_ns"] = time.time_ns()
            browser.close()
    result["first_heard_ns"], result["ended_ns"] = changes(heard)
    result["inbound_at_first_heard"] = (result.get("stats") or {}).get("first_heard")
    if FIRST in result["ended_ns"] and "speech_started_ns" in result:
        result["greeting_over_before_speech"] = result["ended_ns"][FIRST] <= result["speech_started_ns"]
    (workdir / f"heard-{result.get('pc_id', 'failed')}.json").write_text(json.dumps(heard))
    return result


def main(url: str, workdir: str) -> None:
    print(json.dumps({"ready": True}), flush=True)
    for number, line in enumerate(sys.stdin):
        print(json.dumps(call(url, Path(workdir), json.loads(line), number)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
