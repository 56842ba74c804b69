"""The bridge's Prometheus metrics: calls, their latency, search, and the state of upstreams,
sessions and the store.

Calls and searches are counted in plain Python objects on the event loop, with no lock and no
prometheus_client call per call; a scrape renders them, and reads the gauges from the
functions the runtime and the frontends registered, in the text format (or OpenMetrics, when
the scraper asks) through prometheus_client, which is imported at the first scrape.
"""

from __future__ import annotations

import bisect
import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from bridge.model import UpstreamHealth, UpstreamState

__all__ = ["CALL_BUCKETS", "OTHER_TOOLS", "SEARCH_BUCKETS", "Metrics", "ToolLabels"]

# Seconds: a proxied call takes a millisecond to a minute, a search 10 µs to tens of ms.
CALL_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
SEARCH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# The tool label of calls to the tools outside the N busiest (`tool_label: top_N`).
OTHER_TOOLS = "_other"
_STATES: tuple[str, ...] = typing.get_args(UpstreamState)
_CALL_LABELS = ("upstream", "tool", "surface")


class _Histogram:
    """Observations by bucket (the last one past every bound) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, bounds: tuple[float, ...], value: float) -> None:
        self.counts[bisect.bisect_left(bounds, value)] += 1  # Prometheus buckets are `le`
        self.total += value

    def buckets(self, bounds: tuple[float, ...]) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, count in zip((*map(repr, bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class _CallSeries:
    """The calls of one (upstream, tool label, surface): a count per outcome, and latencies."""

    __slots__ = ("latency", "outcomes", "upstream")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.latency = _Histogram(CALL_BUCKETS)
        self.upstream = _Histogram(CALL_BUCKETS)


class ToolLabels:
    """The `tool` label of a call under a `tool_label` policy: `all` (the tool's name), `none`
    (empty: Prometheus drops the label), or `top_N`: the N busiest tools by name, the others as
    `_other`.

    Under `top_N` the first N tools called are named at once; each scrape then names the N
    busiest since the start (`rerank`). A tool named counts under its name only the calls made
    while it is named, the others count under `_other`, so that every series only grows: a
    series whose tool is no longer named is kept, not shown, and goes on where it stopped if
    the tool is named again."""

    def __init__(self, policy: str = "all") -> None:
        self.policy = policy
        self.top = int(policy.removeprefix("top_")) if policy.startswith("top_") else 0
        self.calls: dict[str, int] = {}  # calls by tool since the start (top_N)
        self.named: set[str] = set()

    def label(self, tool: str) -> str:
        if not self.top:
            return tool if self.policy == "all" else ""
        calls = self.calls
        calls[tool] = calls.get(tool, 0) + 1
        if tool in self.named:
            return tool
        if len(self.named) < self.top:
            self.named.add(tool)
            return tool
        return OTHER_TOOLS

    def shown(self, label: str) -> bool:
        return not self.top or label == OTHER_TOOLS or label == "" or label in self.named

    def rerank(self) -> None:
        """Name the N busiest tools (on a tie, one already named stays)."""
        if self.top and len(self.calls) > self.top:
            named = self.named
            ranked = sorted(
                self.calls.items(), key=lambda item: (-item[1], item[0] not in named, item[0])
            )
            self.named = {tool for tool, _ in ranked[: self.top]}


class Metrics:
    """What `GET /metrics` shows. `call_begun` and `call_ended` frame each call of the pipeline;
    `searched` counts each tool search, `rate_limited` each call a rate limit refused; `gauge`
    and `watch_upstreams` register what a scrape
    reads. Used from the event loop only."""

    def __init__(self, tool_label: str = "top_100") -> None:
        self.tools = ToolLabels(tool_label)
        self.in_flight = 0
        self._calls: dict[tuple[str, str, str], _CallSeries] = {}
        self._searches: dict[str, list[Any]] = {}  # surface -> [queries, no match, latency]
        self._limited: dict[tuple[str, str], int] = {}  # (limit, caller class) -> refused
        self._gauges: list[tuple[str, str, Callable[[], float]]] = []
        self._upstreams: Callable[[], Iterable[tuple[UpstreamHealth, int]]] | None = None
        self._registry: Any = None

    # ------------------------------------------------------------------ counting

    def call_begun(self) -> None:
        self.in_flight += 1

    def call_ended(
        self,
        upstream: str,
        tool: str,
        surface: str,
        outcome: str,
        seconds: float,
        upstream_seconds: float | None,
    ) -> None:
        """One call's end: `outcome` is `ok` or its error class; `upstream_seconds` the part the
        upstream took (None when the call never reached it)."""
        self.in_flight -= 1
        tools = self.tools
        if tool and tools.top and tool in tools.named:  # `label` of a named tool, written out
            tools.calls[tool] += 1
            label = tool
        else:
            label = tools.label(tool) if tool else ""
        key = (upstream, label, surface)
        series = self._calls.get(key)
        if series is None:
            series = self._calls[key] = _CallSeries()
        series.outcomes[outcome] = series.outcomes.get(outcome, 0) + 1
        # `_Histogram.observe` written out: it runs once or twice in every call
        latency = series.latency
        latency.counts[bisect.bisect_left(CALL_BUCKETS, seconds)] += 1
        latency.total += seconds
        if upstream_seconds is not None:
            upstream_part = series.upstream
            upstream_part.counts[bisect.bisect_left(CALL_BUCKETS, upstream_seconds)] += 1
            upstream_part.total += upstream_seconds

    def upstream_calls(self, surface: str) -> dict[str, tuple[int, int]]:
        """(calls, errors) by upstream of the calls made through `surface` since the start: what
        the designers' console shows that surface's callers (another surface's are not theirs)."""
        out: dict[str, tuple[int, int]] = {}
        for (upstream, _tool, called_from), series in self._calls.items():
            if called_from != surface or not upstream:
                continue
            calls = sum(series.outcomes.values())
            errors = calls - series.outcomes.get("ok", 0)
            before = out.get(upstream, (0, 0))
            out[upstream] = (before[0] + calls, before[1] + errors)
        return out

    def rate_limited(self, limit: str, caller_class: str) -> None:
        """A call a rate limit refused: counted by the limit's name and the caller's class, never
        by caller, so the series are as many as the limits."""
        key = (limit, caller_class)
        self._limited[key] = self._limited.get(key, 0) + 1

    def searched(self, surface: str, seconds: float, matched: bool) -> None:
        counts = self._searches.get(surface)
        if counts is None:
            counts = self._searches[surface] = [0, 0, _Histogram(SEARCH_BUCKETS)]
        counts[0] += 1
        if not matched:
            counts[1] += 1
        counts[2].observe(SEARCH_BUCKETS, seconds)

    def gauge(self, name: str, documentation: str, read: Callable[[], float]) -> Callable[[], None]:
        """Show `read()` as the gauge `name` at each scrape; returns the function that stops it."""
        entry = (name, documentation, read)
        self._gauges.append(entry)
        return lambda: self._gauges.remove(entry) if entry in self._gauges else None

    def watch_upstreams(self, read: Callable[[], Iterable[tuple[UpstreamHealth, int]]]) -> None:
        """Each upstream's health and its calls in flight, read at each scrape."""
        self._upstreams = read

    # ------------------------------------------------------------------ scraping

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition (body, content type): the text format, or OpenMetrics when `accept`
        asks for it."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry()), content_type

    def registry(self) -> Any:
        """The prometheus_client registry of these metrics and the process's own (CPU, memory,
        open files, garbage collections)."""
        if self._registry is None:
            from prometheus_client import (
                CollectorRegistry,
                GCCollector,
                PlatformCollector,
                ProcessCollector,
            )

            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Collector(self))
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
            self._registry = registry
        return self._registry

    def families(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        self.tools.rerank()
        calls = CounterMetricFamily(
            "bridge_tool_calls",
            "Calls through the invocation pipeline, by outcome (ok or the error class)",
            labels=[*_CALL_LABELS, "outcome"],
        )
        latency = HistogramMetricFamily(
            "bridge_tool_call_duration_seconds",
            "Calls from the frontend's request to the result envelope",
            labels=_CALL_LABELS,
        )
        upstream = HistogramMetricFamily(
            "bridge_upstream_call_duration_seconds",
            "The upstream's part of each call that reached it",
            labels=_CALL_LABELS,
        )
        for key, series in self._calls.items():
            if not self.tools.shown(key[1]):
                continue
            labels = list(key)
            for outcome, count in series.outcomes.items():
                calls.add_metric([*labels, outcome], count)
            latency.add_metric(labels, series.latency.buckets(CALL_BUCKETS), series.latency.total)
            if series.upstream.counts != [0] * len(series.upstream.counts):
                upstream.add_metric(
                    labels, series.upstream.buckets(CALL_BUCKETS), series.upstream.total
                )
        yield from (calls, latency, upstream)
        yield GaugeMetricFamily(
            "bridge_tool_calls_in_flight",
            "Calls in the invocation pipeline now",
            value=self.in_flight,
        )

        queries = CounterMetricFamily("bridge_search_queries", "Tool searches", labels=["surface"])
        empty = CounterMetricFamily(
            "bridge_search_no_match", "Tool searches that matched no tool", labels=["surface"]
        )
        search_latency = HistogramMetricFamily(
            "bridge_search_duration_seconds", "Tool searches", labels=["surface"]
        )
        for surface, (count, unmatched, histogram) in self._searches.items():
            queries.add_metric([surface], count)
            empty.add_metric([surface], unmatched)
            search_latency.add_metric([surface], histogram.buckets(SEARCH_BUCKETS), histogram.total)
        yield from (queries, empty, search_latency)
        limited = CounterMetricFamily(
            "bridge_rate_limited_calls",
            "Calls a rate limit refused, by limit and caller class",
            labels=["limit", "caller_class"],
        )
        for (limit, caller_class), count in self._limited.items():
            limited.add_metric([limit, caller_class], count)
        yield limited

        if self._upstreams is not None:
            state = GaugeMetricFamily(
                "bridge_upstream_state",
                "1 for the state each upstream is in",
                labels=["upstream", "kind", "state"],
            )
            tools = GaugeMetricFamily(
                "bridge_catalog_tools",
                "Tools each upstream has in the catalog",
                labels=["upstream"],
            )
            reconnects = CounterMetricFamily(
                "bridge_upstream_reconnects",
                "Connection attempts after each upstream's first "
                "(retries of a failed start, reconnects after an outage)",
                labels=["upstream"],
            )
            in_flight = GaugeMetricFamily(
                "bridge_upstream_calls_in_flight",
                "Calls each upstream is running now",
                labels=["upstream"],
            )
            for health, calls_now in self._upstreams():
                for name in _STATES:
                    state.add_metric(
                        [health.name, health.kind, name], 1 if health.state == name else 0
                    )
                tools.add_metric([health.name], health.tool_count)
                reconnects.add_metric([health.name], max(0, health.attempts - 1))
                in_flight.add_metric([health.name], calls_now)
            yield from (state, tools, reconnects, in_flight)
        for name, documentation, read in self._gauges:
            yield GaugeMetricFamily(name, documentation, value=read())


class _Collector:
    """prometheus_client's view of a `Metrics` (its `collect`)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        return self.metrics.families()
