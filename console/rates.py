"""How fast each stream grows: totals sampled over time, as a rate now and a 15-minute sparkline.

The totals are whatever counts only up: the events committed to each tag
(``windvane_stream_events_total`` of a serving process, for all its
workers) or, where nothing ingests, the rows each stream holds. Samples
are kept one per minute for the sparkline and a minute's worth at the
sampling interval for the rate, so memory stays proportional to the
number of streams, not to the time the console runs.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Mapping

#: The sparkline's buckets, and the seconds each covers.
BUCKETS, BUCKET_SECONDS = 15, 60.0
#: The shortest span of samples a rate is given for: shorter ones say more of when the samples were taken
#: than of the stream.
MIN_SPAN = 5.0


class Rates:
    """Samples of per-tag totals; ``record`` from one thread, the readers from any."""

    def __init__(self, window: float = 60.0):
        self.window = window
        self._recent: deque[tuple[float, dict[str, float]]] = deque()
        self._minutes: deque[tuple[float, dict[str, float]]] = deque(maxlen=BUCKETS + 1)
        self._lock = threading.Lock()

    def record(self, when: float, totals: Mapping[str, float]) -> None:
        """Totals as they stood at ``when`` (Unix time, increasing)."""
        sample = (when, dict(totals))
        with self._lock:
            self._recent.append(sample)
            while len(self._recent) > 2 and when - self._recent[1][0] >= self.window:
                self._recent.popleft()
            if not self._minutes or when - self._minutes[-1][0] >= BUCKET_SECONDS:
                self._minutes.append(sample)

    def per_second(self, tag: str) -> float | None:
        """The tag's growth a second over the last ``window`` (None until two samples span time)."""
        with self._lock:
            if len(self._recent) < 2:
                return None
            (t0, first), (t1, last) = self._recent[0], self._recent[-1]
        if t1 - t0 < MIN_SPAN:
            return None
        return max(0.0, last.get(tag, 0.0) - first.get(tag, 0.0)) / (t1 - t0)

    def growth(self) -> dict[str, float] | None:
        """How much each total grew over the last ``window`` (None until two samples span time)."""
        with self._lock:
            if len(self._recent) < 2 or self._recent[-1][0] - self._recent[0][0] < MIN_SPAN:
                return None
            first, last = self._recent[0][1], self._recent[-1][1]
        return {key: max(0.0, value - first.get(key, 0.0)) for key, value in last.items()}

    def sparkline(self, tag: str) -> list[float | None]:
        """The tag's growth a second in each of the last :data:`BUCKETS` minutes, oldest first; None where
        the console has no samples yet."""
        with self._lock:
            minutes = list(self._minutes)
            latest = self._recent[-1] if self._recent else None
        points: list[tuple[float, dict[str, float]]] = [*minutes, *([latest] if latest is not None else [])]
        out: list[float | None] = [None] * BUCKETS
        pairs = list(itertools.pairwise(points))[-BUCKETS:]
        for i, ((t0, a), (t1, b)) in enumerate(pairs, start=BUCKETS - len(pairs)):
            if t1 > t0:
                out[i] = max(0.0, b.get(tag, 0.0) - a.get(tag, 0.0)) / (t1 - t0)
        return out


def sparkline_points(values: list[float | None], width: int = 90, height: int = 18) -> str:
    """An SVG polyline's ``points`` for ``values`` (gaps drawn at zero), scaled to the box."""
    top = max((v for v in values if v is not None), default=0.0) or 1.0
    step = width / max(len(values) - 1, 1)
    return " ".join(
        f"{i * step:.1f},{height - (0.0 if v is None else v) / top * (height - 2) - 1:.1f}"
        for i, v in enumerate(values)
    )


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The ``q`` quantile of a histogram's cumulative ``buckets`` (upper bound -> count), interpolated within
    its bucket as Prometheus's ``histogram_quantile`` does; None when it counts nothing."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if not total:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper in bounds:
        count = buckets[upper]
        if count >= rank:
            if upper == float("inf"):
                return lower
            share = (rank - below) / (count - below) if count > below else 1.0
            return lower + (upper - lower) * share
        lower, below = upper, count
    return lower
