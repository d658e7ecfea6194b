"""Write the sample files ``windvane demo`` sends (see README.md beside this file for their sources).

Run from the repository root::

    python windvane/ops/samples/make_samples.py --openoa-wheel openoa-3.2-py3-none-any.whl

The SCADA file is cut, line for line, from the La Haute Borne data set in
openoa's wheel (``pip download --no-deps openoa==3.2``); the vibration
recording and the access log are synthetic, generated here from fixed
seeds, so the same files come out every time (gzip with a zero mtime).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import wave
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

SCADA_FILE = "scada_la_haute_borne_2014-02-03.csv.gz"
VIBRATION_FILE = "vibration_R80736_drive_train.wav"
LOG_FILE = "access_log_web1.ndjson.gz"

# One week of the 2014-2015 data, all four turbines: 4,032 ten-minute rows, four of them empty (R80711 down).
SCADA_WEEK = (datetime(2014, 2, 3, tzinfo=UTC), datetime(2014, 2, 10, tzinfo=UTC))

# The vibration recording: 3 axes (x, y radial; z axial) of a generator bearing at 25.6 kHz, int16 counts.
SAMPLE_RATE = 25_600
SECONDS = 2.0
COUNTS_PER_MS2 = 1000  # 1 count = 0.001 m/s^2: +-32.767 m/s^2 full scale
SHAFT_HZ = 25.0  # generator shaft at 1500 rpm
BPFO_ORDER = 3.57  # outer-race defect frequency in shaft orders (a 9-ball deep-groove bearing)
MESH_TEETH = 23  # high-speed pinion: gear mesh at 575 Hz
RESONANCE_HZ = 3_200.0  # the housing resonance the defect's impacts ring
LOG_LINES = 3_000
LOG_START = datetime(2014, 2, 5, 8, 0, tzinfo=UTC)


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzipped with no name and a zero mtime, so that equal data gives equal files."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as f:
        f.write(data)
    return out.getvalue()


def scada_week(wheel: Path) -> bytes:
    """The header and the lines of :data:`SCADA_WEEK`, verbatim, from openoa's ``la_haute_borne.zip``."""
    with zipfile.ZipFile(wheel) as whl, zipfile.ZipFile(io.BytesIO(whl.read("examples/data/la_haute_borne.zip"))) as z:
        text = z.read("la-haute-borne-data-2014-2015.csv").decode("ascii")
    header, *lines = text.splitlines()
    start, stop = SCADA_WEEK
    kept = [line for line in lines if start <= datetime.fromisoformat(line.split(",")[1]) < stop]
    return ("\n".join([header, *kept]) + "\n").encode("ascii")


def vibration() -> np.ndarray:
    """Frames x 3 int16 counts: shaft orders, gear mesh with sidebands, outer-race impacts ringing a resonance, noise."""
    rng = np.random.default_rng(20140205)
    t = np.arange(int(SAMPLE_RATE * SECONDS)) / SAMPLE_RATE
    gains = np.array([1.0, 0.8, 0.35])  # the defect is radial: the axial channel sees less of it
    signal = np.zeros((len(t), 3))
    for axis in range(3):
        phase = rng.uniform(0, 2 * np.pi, 4)
        signal[:, axis] += 0.8 * np.sin(2 * np.pi * SHAFT_HZ * t + phase[0])  # imbalance
        signal[:, axis] += 0.3 * np.sin(2 * np.pi * 2 * SHAFT_HZ * t + phase[1])  # misalignment
        mesh = MESH_TEETH * SHAFT_HZ
        signal[:, axis] += (1.2 + 0.25 * np.sin(2 * np.pi * SHAFT_HZ * t + phase[2])) * np.sin(
            2 * np.pi * mesh * t + phase[3]
        )  # mesh, modulated by the shaft: sidebands at +-25 Hz
    # Each roller passing the defect strikes once: impacts every 1/BPFO s (with 1% slip jitter),
    # each a decaying ring of the housing resonance, stronger in the load zone (once per turn).
    period = 1 / (BPFO_ORDER * SHAFT_HZ)
    ring_t = np.arange(int(0.004 * SAMPLE_RATE)) / SAMPLE_RATE
    ring = np.exp(-ring_t / 0.0006) * np.sin(2 * np.pi * RESONANCE_HZ * ring_t)
    at = 0.0013
    while at < SECONDS:
        start = int(at * SAMPLE_RATE)
        stop = min(len(t), start + len(ring))
        load = 0.6 + 0.4 * np.cos(2 * np.pi * SHAFT_HZ * at)
        strength = 6.0 * load * rng.uniform(0.8, 1.2)
        signal[start:stop] += strength * gains * ring[: stop - start, None]
        at += period * rng.normal(1.0, 0.01)
    signal += rng.normal(0.0, 0.4, signal.shape)
    return np.clip(np.round(signal * COUNTS_PER_MS2), -32768, 32767).astype("<i2")


def wav_bytes(frames: np.ndarray) -> bytes:
    """``frames`` (frames x channels int16) as a PCM WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(frames.tobytes())
    return out.getvalue()


_PATHS = [
    ("GET", "/api/turbines/{t}/scada?from={d}", 0.45),
    ("GET", "/api/turbines/{t}/vibration/latest", 0.2),
    ("GET", "/static/app.js", 0.12),
    ("GET", "/dashboard", 0.1),
    ("POST", "/api/alarms/{t}/ack", 0.05),
    ("GET", "/health", 0.08),
]
_AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:26.0) Gecko/20100101 Firefox/26.0",
    "python-requests/2.2.1 CPython/2.7.6 Linux/3.11.0",
    "Grafana/1.9.1",
    "curl/7.34.0",
]
_TURBINES = ["R80711", "R80721", "R80736", "R80790"]
_STATUSES = [200, 304, 404, 499, 502]
_STATUS_P = [0.9, 0.04, 0.03, 0.02, 0.01]


def access_log() -> bytes:
    """:data:`LOG_LINES` nginx access-log events as JSON lines, what nginx's ``escape=json`` log_format writes.

    Addresses are from the documentation ranges (RFC 5737). ``latency_ms``
    is the upstream's response time: absent for static files and health
    checks, which never reach the upstream, and ``"-"`` (nginx's word for
    no time) when the upstream could not be reached (502). Those few lines
    do not fit the schema's float ``latency_ms`` and are quarantined, as they
    would be from a real server.
    """
    rng = np.random.default_rng(20140203)
    weights = np.array([w for *_, w in _PATHS])
    at = LOG_START
    lines = []
    for _ in range(LOG_LINES):
        at += timedelta(milliseconds=int(rng.exponential(1200)) + 1)
        method, pattern, _ = _PATHS[rng.choice(len(_PATHS), p=weights / weights.sum())]
        path = pattern.format(t=_TURBINES[rng.integers(4)], d=(at - timedelta(days=1)).strftime("%Y-%m-%d"))
        upstream = path.startswith("/api/") or path == "/dashboard"
        status = int(rng.choice(_STATUSES, p=_STATUS_P)) if upstream else 200
        level = "error" if status >= 500 else "warn" if status >= 400 else "info"
        remote = f"{rng.choice(['192.0.2', '198.51.100', '203.0.113'])}.{rng.integers(1, 255)}"
        size = int(rng.integers(200, 60_000)) if status == 200 else 0
        agent = _AGENTS[rng.integers(len(_AGENTS))]
        stamp = at.strftime("%d/%b/%Y:%H:%M:%S +0000")
        event = {
            "time": round(at.timestamp(), 3),
            "host": "web1",
            "level": level,
            "message": f'{remote} - - [{stamp}] "{method} {path} HTTP/1.1" {status} {size} "-" "{agent}"',
            "status": status,
            "remote_addr": remote,
            "method": method,
            "path": path,
            "bytes_sent": size,
            "request_id": f"{rng.integers(1 << 62):016x}",
            "user_agent": agent,
        }
        if upstream:
            event["latency_ms"] = "-" if status == 502 else round(float(rng.lognormal(3.2, 0.6)), 3)
        lines.append(json.dumps(event, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--openoa-wheel", type=Path, help="openoa-3.2-py3-none-any.whl (only to rewrite the SCADA file)"
    )
    args = parser.parse_args()
    if args.openoa_wheel:
        (HERE / SCADA_FILE).write_bytes(gzip_bytes(scada_week(args.openoa_wheel)))
    (HERE / VIBRATION_FILE).write_bytes(wav_bytes(vibration()))
    (HERE / LOG_FILE).write_bytes(gzip_bytes(access_log()))


if __name__ == "__main__":
    main()
