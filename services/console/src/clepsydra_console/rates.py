"""Rates for "the system at a glance" and the group pages: the services' Prometheus counters
(``/metrics``, open to probes) read when a page asks, at most once every ``min_gap_s``, and the
rate taken between the newest reading and the oldest one within ``window_s``
(DEC-console-rates-on-demand). Nothing runs between page views: a console at rest reads nothing.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

Counters = dict[str, float]
"""``name{label="v",...}`` (as the text format writes it) or ``name`` -> value."""

PRODUCED = "clepsydra_store_produced_messages_total"
DELIVERED = "clepsydra_store_schedule_delivered_total"
SEND_BACKS = "clepsydra_retry_send_backs_total"
DLQ_DEPTH = "clepsydra_retry_dlq_depth"


def parse_metrics(text: str, wanted: tuple[str, ...]) -> Counters:
    """The samples of the metric families named in ``wanted`` from Prometheus text."""
    out: Counters = {}
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(wanted):
            continue
        name, _, rest = line.rpartition(" ")
        try:
            out[name] = float(rest)
        except ValueError:
            continue
    return out


def total(counters: Mapping[str, float], name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in counters.items()
               if (k == name or k.startswith(name + "{")) and all(w in k for w in want))


def fetch_text(base_url: str, path: str, timeout_s: float) -> str:
    """GET a text page (``/metrics``) of a plain-HTTP service; OSError when it does not
    answer 200."""
    parts = urlsplit(base_url)
    conn_type = http.client.HTTPSConnection if parts.scheme == "https" \
        else http.client.HTTPConnection
    conn = conn_type(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    try:
        conn.request("GET", parts.path.rstrip("/") + path)
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", "replace")
        if resp.status != 200:
            raise OSError(f"{base_url}{path} answered {resp.status}")
        return body
    finally:
        conn.close()


@dataclass(frozen=True, slots=True)
class Reading:
    at_s: float
    counters: Counters


class Sampler:
    """Readings of one service's counters, taken on demand; rates per second between them."""

    def __init__(self, read: Callable[[], Counters], *, min_gap_s: float = 2.0,
                 window_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self.min_gap_s = min_gap_s
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._readings: deque[Reading] = deque(maxlen=256)
        self.error: str | None = None

    def latest(self) -> Reading | None:
        """Read now unless the newest reading is younger than ``min_gap_s``; the newest
        reading (None when none could be taken; ``error`` says why)."""
        now = self._clock()
        with self._lock:
            newest = self._readings[-1] if self._readings else None
            if newest is not None and now - newest.at_s < self.min_gap_s:
                return newest
        try:
            reading = Reading(now, self._read())
            self.error = None
        except OSError as exc:
            self.error = str(exc)
            return None
        with self._lock:
            self._readings.append(reading)
            while self._readings and now - self._readings[0].at_s > self.window_s:
                self._readings.popleft()
            return reading

    def rate(self, name: str, **labels: str) -> float | None:
        """Per second, between the oldest reading of the window and the newest; None until two
        readings lie ``min_gap_s`` apart (or a counter went back: a restart)."""
        self.latest()
        with self._lock:
            if len(self._readings) < 2:
                return None
            first, last = self._readings[0], self._readings[-1]
        span = last.at_s - first.at_s
        if span < self.min_gap_s:
            return None
        delta = total(last.counters, name, **labels) - total(first.counters, name, **labels)
        return None if delta < 0 else delta / span

    def value(self, name: str, **labels: str) -> float | None:
        reading = self.latest()
        return None if reading is None else total(reading.counters, name, **labels)


class ShardSamplers:
    """The store's counters per store shard (DEC-console-shards): one :class:`Sampler` per
    shard address, made at its first use; rates and values summed over the shards asked."""

    def __init__(self, make: Callable[[str], Sampler]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._by_url: dict[str, Sampler] = {}

    def of(self, url: str) -> Sampler:
        with self._lock:
            found = self._by_url.get(url)
            if found is None:
                found = self._by_url[url] = self._make(url)
            return found

    def rate(self, urls: Iterable[str], name: str, **labels: str) -> Summed:
        """The rate summed over the shards at ``urls``: None while any shard that answers is
        still measuring; the shards whose counters could not be read are left out and
        named in ``errors``."""
        total_rate: float | None = 0.0
        errors: list[str] = []
        for url in urls:
            sampler = self.of(url)
            value = sampler.rate(name, **labels)
            if sampler.error is not None:
                errors.append(f"{url}: {sampler.error}")
            elif value is None:
                total_rate = None
            elif total_rate is not None:
                total_rate += value
        return Summed(total_rate, errors)


@dataclass(frozen=True, slots=True)
class Summed:
    value: float | None
    errors: list[str]
