"""Each agent speaks a tone of its own frequency, so whoever hears a frame knows whose it is."""

from __future__ import annotations

import numpy as np

# agent label -> its voice: neither a harmonic of the other, both well inside Opus's band
TONES = {"triage": 650.0, "billing": 1450.0}
AMPLITUDE = 0.3  # of full scale
_HEARD = 0.03  # a tone at least this loud (of full scale) over a frame is heard


def tone(frequency: float, seconds: float, sample_rate: int) -> bytes:
    """``seconds`` of a sine at ``frequency``, 16-bit mono PCM, starting at full amplitude so its
    first frame is recognisable."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (AMPLITUDE * 32767 * np.sin(2 * np.pi * frequency * t)).astype(np.int16).tobytes()


def levels(samples: np.ndarray, sample_rate: int) -> dict[str, float]:
    """The amplitude (of full scale) at each agent's frequency over ``samples`` (int16, mono): a
    single-bin DFT."""
    if samples.size == 0:
        return dict.fromkeys(TONES, 0.0)
    x = samples.astype(np.float64) / 32768.0
    t = np.arange(x.size) / sample_rate
    return {name: 2 * abs(np.dot(x, np.exp(-2j * np.pi * f * t))) / x.size for name, f in TONES.items()}


def whose(samples: np.ndarray, sample_rate: int) -> str | None:
    """The agent whose tone ``samples`` carry, or None (silence, speech, noise): its tone is loud
    enough and clearly louder than the other's."""
    level = levels(samples, sample_rate)
    loudest = max(level, key=level.__getitem__)
    others = max((v for name, v in level.items() if name != loudest), default=0.0)
    return loudest if level[loudest] >= _HEARD and level[loudest] > 3 * others else None


def rms(samples: np.ndarray) -> float:
    """Root mean square of int16 samples, as a fraction of full scale."""
    if samples.size == 0:
        return 0.0
    x = samples.astype(np.float64) / 32768.0
    return float(np.sqrt(np.mean(x * x)))
