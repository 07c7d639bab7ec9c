"""A seeded, realistic clickstream producer, with a record of what it sent.

Zipf page popularity, a user pool with sessions (device and country per user, a referrer on a
session's first page), a daily rhythm in event density, and knobs for late events, exact
duplicates (the same bytes re-sent, same event_id) and invalid records of every kind the
contract rejects. The same seed and start time give the same records.

Sends are batched and asynchronous (kafka-python); the record of what was sent (kind, event_id,
Kafka partition, offset and ingest time as the broker stamped it) can be written to a JSONL file
so tests and reports can compare the platform's answers with the truth.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

from definitions.events import CHANNELS, MAX_EVENT_BYTES, SCHEMA_VERSION, format_time
from definitions.settings import Settings
from stores.kafka import COMPRESSION_CODECS

log = logging.getLogger(__name__)

INVALID_KINDS = (
    "malformed_json",
    "missing_field",
    "mistyped_field",
    "absurd_timestamp",
    "oversized",
    "bad_event_type",
    "unknown_field",
    "not_an_object",
)
# Bounds on what the generator holds before it sends anything (each page's URL and weight, each
# user's traits, each simulated event time): ~100 MB at each, built in seconds.
MAX_PAGES = 1_000_000
MAX_USERS = 1_000_000
MAX_SIMULATED_COUNT = 10_000_000  # events whose times are spread over --span (sorted in memory first)
MIN_RATE = 0.001  # records per second, when paced: a record every 1,000 s at most
# Bytes handed to the producer and not yet acknowledged or failed, at most: past it the generator
# waits for Kafka. kafka-python bounds no buffer, so a generator faster than Kafka (or one running
# while Kafka is away) held all it made until each record's two-minute delivery timeout.
MAX_UNACKNOWLEDGED_BYTES = 64 * 1024 * 1024
EARLIEST_EVENT = datetime(1970, 1, 1, tzinfo=UTC)

_TYPE_WEIGHTS = {"page_view": 0.80, "click": 0.12, "add_to_cart": 0.05, "purchase": 0.02, "signup": 0.01}
_DEVICES = (("mobile", 0.55), ("desktop", 0.38), ("tablet", 0.06), ("other", 0.01))
_CHANNEL_WEIGHTS = (0.6, 0.3, 0.1)  # web, app, api
_COUNTRIES = (
    ("US", 0.30),
    ("DE", 0.12),
    ("GB", 0.10),
    ("FR", 0.08),
    ("IN", 0.10),
    ("BR", 0.07),
    ("JP", 0.06),
    ("CA", 0.05),
    ("NL", 0.04),
    ("ES", 0.04),
    ("IT", 0.04),
)
_REFERRERS = (
    "https://www.google.com/",
    "https://news.ycombinator.com/",
    "https://t.co/",
    "https://www.bing.com/",
    None,
    None,
)


@dataclass(frozen=True)
class GeneratorConfig:
    seed: int = 42
    count: int = 10_000
    rate: float = 0.0  # records per second; 0 = as fast as possible
    pages: int = 500
    zipf_s: float = 1.1
    users: int = 5_000
    # Event times: "live" stamps each event at send time; otherwise events are spread over the
    # `span_s` seconds before `start` following a daily rhythm (start defaults to now).
    span_s: float = 0.0
    start: datetime | None = None
    late_fraction: float = 0.0
    late_min_s: float = 3_600.0
    late_max_s: float = 2 * 86_400.0
    duplicate_fraction: float = 0.0
    duplicate_window: int = 1_000  # a duplicate re-sends one of the last N valid events
    invalid_fraction: float = 0.0
    topic: str = ""
    # Prepended to every page path: lets a test own a set of URLs no other traffic touches.
    url_prefix: str = ""
    # Share of events sent as an older producer would, as schema_version 1 (no channel); the others
    # are version 2 and carry a channel.
    v1_fraction: float = 0.3
    # The producer's compression codec, as a Kafka client may choose it: none, gzip, snappy, lz4, zstd.
    compression: str = "none"

    def __post_init__(self) -> None:
        for name in ("late_fraction", "duplicate_fraction", "invalid_fraction", "v1_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.late_fraction + self.duplicate_fraction + self.invalid_fraction > 1.0:
            raise ValueError("late, duplicate and invalid fractions add up to more than 1")
        for name in ("rate", "span_s", "late_min_s", "late_max_s"):
            if not math.isfinite(getattr(self, name)):  # nan passed every check below
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.count < 0 or self.rate < 0 or self.span_s < 0:
            raise ValueError("count, rate and span must not be negative")
        if self.pages < 1 or self.users < 1:
            raise ValueError("pages and users must be at least 1")
        if self.url_prefix and not self.url_prefix.startswith("/"):
            raise ValueError("url_prefix must start with '/'")
        if self.late_min_s > self.late_max_s:
            raise ValueError("late_min_s must not exceed late_max_s")
        self._check_bounds()

    def _check_bounds(self) -> None:
        """What no run could honour: more held in memory than the bounds, a pace of one record in
        years, event times before 1970 (a late one included), a span's end without a span."""
        if self.pages > MAX_PAGES or self.users > MAX_USERS:
            raise ValueError(f"pages and users must be at most {MAX_PAGES:,} and {MAX_USERS:,}")
        if self.span_s > 0 and self.count > MAX_SIMULATED_COUNT:
            raise ValueError(
                f"count must be at most {MAX_SIMULATED_COUNT:,} with span_s (their times are sorted in memory "
                "first): send more in several runs"
            )
        if 0 < self.rate < MIN_RATE:
            raise ValueError(
                f"rate must be 0 (as fast as possible) or at least {MIN_RATE:g} records/s, got {self.rate:g}"
            )
        if self.late_min_s < 0:
            raise ValueError(
                f"late_min_s must not be negative (a late event is stamped before now), got {self.late_min_s:g}"
            )
        if self.start is not None and self.span_s == 0:
            raise ValueError(
                "start is the end of a simulated span: give span_s too (without it events are stamped now)"
            )
        end = self.start or datetime.now(UTC)
        earliest_s = (end - EARLIEST_EVENT).total_seconds()
        if self.span_s > earliest_s:
            raise ValueError(f"span_s reaches before 1970 from {format_time(end)}: at most {earliest_s:,.0f} s")
        if self.late_fraction > 0 and self.span_s + self.late_max_s > earliest_s:
            raise ValueError(
                f"late_max_s with span_s reaches before 1970 from {format_time(end)}: together at most {earliest_s:,.0f} s"
            )
        if self.compression not in COMPRESSION_CODECS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSION_CODECS)}, got {self.compression!r}")


@dataclass
class Record:
    """One record to send: its bytes and what it is."""

    kind: str  # "valid", "late", "duplicate" or one of INVALID_KINDS
    key: bytes
    value: bytes
    event_id: str | None = None


@dataclass
class SentRecord:
    kind: str
    event_id: str | None
    partition: int
    offset: int
    ingest_time_ms: int
    value: str


@dataclass
class SendReport:
    sent: int = 0
    failed: int = 0
    seconds: float = 0.0
    by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0


class _Weighted:
    def __init__(self, items, weights, rng: random.Random) -> None:
        self.items = list(items)
        total = float(sum(weights))
        acc, self.cum = 0.0, []
        for w in weights:
            acc += w / total
            self.cum.append(acc)
        self.rng = rng

    def pick(self):
        return self.items[min(bisect.bisect_left(self.cum, self.rng.random()), len(self.items) - 1)]


def page_urls(count: int) -> list[str]:
    """The site's pages, most popular first."""
    fixed = ["/", "/products", "/search", "/cart", "/checkout", "/about", "/blog"]
    urls = fixed[:count]
    i = 0
    while len(urls) < count:
        urls.append(f"/products/{i}" if i % 3 else f"/blog/post-{i}")
        i += 1
    return urls


class ClickstreamGenerator:
    """Deterministic record stream for a config (and its start time)."""

    def __init__(self, config: GeneratorConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.urls = [config.url_prefix + u if config.url_prefix else u for u in page_urls(config.pages)]
        self.pages = _Weighted(
            self.urls, [1.0 / (rank**config.zipf_s) for rank in range(1, config.pages + 1)], self.rng
        )
        self.types = _Weighted(_TYPE_WEIGHTS.keys(), _TYPE_WEIGHTS.values(), self.rng)
        devices = _Weighted([d for d, _ in _DEVICES], [w for _, w in _DEVICES], self.rng)
        countries = _Weighted([c for c, _ in _COUNTRIES], [w for _, w in _COUNTRIES], self.rng)
        self.user_traits = [(devices.pick(), countries.pick()) for _ in range(config.users)]
        self.channels = _Weighted(CHANNELS, _CHANNEL_WEIGHTS, self.rng)
        self.sessions: list[list] = []  # [user index, pages left]
        self.recent: deque[Record] = deque(maxlen=config.duplicate_window)
        self.start = config.start or datetime.now(UTC)
        self.sim_times = self._simulated_times() if config.span_s > 0 else None

    def _simulated_times(self) -> list[float]:
        """Offsets (seconds before start) of `count` events following a daily rhythm, ascending in time."""
        c = self.config
        begin = self.start - timedelta(seconds=c.span_s)
        offsets: list[float] = []
        while len(offsets) < c.count:
            t = self.rng.uniform(0, c.span_s)
            hour = (begin + timedelta(seconds=t)).hour + (begin + timedelta(seconds=t)).minute / 60.0
            density = 1.0 + 0.7 * math.sin(2 * math.pi * (hour - 9.0) / 24.0)  # peak mid-afternoon, trough at night
            if self.rng.uniform(0, 1.7) <= density:
                offsets.append(c.span_s - t)
        return sorted(offsets, reverse=True)

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _next_visit(self) -> tuple[int, str | None]:
        if not self.sessions or self.rng.random() < 0.3:
            user = self.rng.randrange(self.config.users)
            self.sessions.append([user, 1 + int(self.rng.expovariate(1 / 5.0))])
            referrer = self.rng.choice(_REFERRERS)
        else:
            referrer = None
        idx = self.rng.randrange(len(self.sessions))
        session = self.sessions[idx]
        session[1] -= 1
        if session[1] <= 0:
            self.sessions.pop(idx)
        return session[0], referrer

    def _event(self, index: int, late: bool) -> dict:
        user, referrer = self._next_visit()
        device, country = self.user_traits[user]
        if self.sim_times is not None:
            moment = self.start - timedelta(seconds=self.sim_times[index])
        else:
            moment = datetime.now(UTC)
        if late:
            moment -= timedelta(seconds=self.rng.uniform(self.config.late_min_s, self.config.late_max_s))
        return {
            "event_id": self._uuid(),
            "event_time": format_time(moment),
            "user_id": f"u-{user}",
            "url": self.pages.pick(),
            "event_type": self.types.pick(),
            "referrer": referrer,
            "country": country,
            "device": device,
            **self._version_fields(),
        }

    def _version_fields(self) -> dict:
        if self.rng.random() < self.config.v1_fraction:
            return {"schema_version": 1}
        return {"schema_version": SCHEMA_VERSION, "channel": self.channels.pick()}

    def _invalid(self, event: dict) -> tuple[str, bytes]:
        kind = self.rng.choice(INVALID_KINDS)
        bad = dict(event)
        if kind == "malformed_json":
            text = json.dumps(bad)
            return kind, text[: self.rng.randrange(1, len(text) - 1)].encode()
        if kind == "missing_field":
            del bad[self.rng.choice(["event_id", "event_time", "user_id", "url", "event_type"])]
        elif kind == "mistyped_field":
            name = self.rng.choice(["event_time", "user_id", "url", "schema_version"])
            bad[name] = {"event_time": 1700000000, "user_id": 12345, "url": ["/"], "schema_version": "1"}[name]
        elif kind == "absurd_timestamp":
            bad["event_time"] = self.rng.choice(["1969-07-20T20:17:40.000Z", "2999-01-01T00:00:00.000Z"])
        elif kind == "oversized":
            bad["referrer"] = "https://example.com/?" + "x" * (MAX_EVENT_BYTES + 100)
        elif kind == "bad_event_type":
            bad["event_type"] = self.rng.choice(["pageview", "CLICK", "hover"])
        elif kind == "unknown_field":
            bad["session_secret"] = "x"
        elif kind == "not_an_object":
            return kind, json.dumps([bad["event_id"], bad["url"]]).encode()
        return kind, json.dumps(bad).encode()

    def records(self) -> Iterator[Record]:
        c = self.config
        for index in range(c.count):
            roll = self.rng.random()
            if roll < c.duplicate_fraction and self.recent:
                original = self.rng.choice(self.recent)
                # The event itself is still drawn so that the rest of the stream stays the same.
                self._event(index, late=False)
                yield Record("duplicate", original.key, original.value, original.event_id)
                continue
            late = c.duplicate_fraction <= roll < c.duplicate_fraction + c.late_fraction
            invalid = 0 <= roll - c.duplicate_fraction - c.late_fraction < c.invalid_fraction
            event = self._event(index, late)
            key = event["user_id"].encode()
            if invalid:
                kind, value = self._invalid(event)
                yield Record(kind, key, value, None)
                continue
            record = Record(
                "late" if late else "valid", key, json.dumps(event, separators=(",", ":")).encode(), event["event_id"]
            )
            self.recent.append(record)
            yield record


def produce(
    settings: Settings, config: GeneratorConfig, events_out: IO[str] | None = None, progress_every: int = 0
) -> SendReport:
    """Send the configured stream to Kafka; write one JSON line per sent record to `events_out`."""
    from stores import kafka

    topic = config.topic or settings.kafka.events_topic
    producer = kafka.producer(
        settings,
        "lambda-generator",
        linger_ms=20,
        batch_size=256 * 1024,
        max_request_size=2 * 1024 * 1024,
        retries=5,
        compression_type=None if config.compression == "none" else config.compression,
    )
    report = SendReport()
    lock = threading.Condition()
    failures: list[str] = []
    unacknowledged = [0]  # bytes

    def on_sent(record: Record, metadata) -> None:
        with lock:
            report.sent += 1
            unacknowledged[0] -= len(record.value)
            lock.notify()
            if events_out is not None:
                sent = SentRecord(
                    record.kind,
                    record.event_id,
                    metadata.partition,
                    metadata.offset,
                    metadata.timestamp,
                    record.value.decode("utf-8", errors="replace"),
                )
                events_out.write(json.dumps(asdict(sent)) + "\n")

    def on_error(record: Record, exc: Exception) -> None:
        with lock:
            report.failed += 1
            unacknowledged[0] -= len(record.value)
            lock.notify()
            if len(failures) < 5:
                failures.append(repr(exc))

    started = time.monotonic()
    try:
        for n, record in enumerate(ClickstreamGenerator(config).records(), start=1):
            if config.rate > 0:
                due = started + n / config.rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            with lock:
                lock.wait_for(lambda: unacknowledged[0] < MAX_UNACKNOWLEDGED_BYTES)
                unacknowledged[0] += len(record.value)
            future = producer.send(topic, key=record.key, value=record.value)
            future.add_callback(lambda md, r=record: on_sent(r, md))
            future.add_errback(lambda exc, r=record: on_error(r, exc))
            report.by_kind[record.kind] = report.by_kind.get(record.kind, 0) + 1
            if progress_every and n % progress_every == 0:
                log.info("queued %d / %d records (%.0f/s)", n, config.count, n / (time.monotonic() - started))
        producer.flush()
    finally:
        producer.close()
    report.seconds = time.monotonic() - started
    if failures:
        log.error("%d record(s) could not be sent; first errors: %s", report.failed, "; ".join(failures))
    return report


def read_sent(path: Path) -> list[SentRecord]:
    """The records a run of the generator wrote with `events_out`."""
    with open(path) as handle:
        return [SentRecord(**json.loads(line)) for line in handle if line.strip()]
