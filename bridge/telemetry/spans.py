"""The bridge's spans: OpenTelemetry API spans the bridge makes itself, handed once ended to the
span export child (`export_child`) as compact tuples, or to an SDK span processor as the SDK's
`ReadableSpan`, which its exporters read.

The SDK's tracer takes about 50 µs to begin and end a span on a small machine (a sampler, an
id generator, its attribute checks with a lock taken per attribute, each processor's start and
end hooks: some 125 Python calls); these take about 5. What they leave out the bridge has no
use for: the sampler decided once per trace before any span begins, the attributes are the
bridge's own values of plain types, and a span records no events, links or exceptions."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, TraceFlags

__all__ = ["BridgeSpan", "Spans", "handed_to"]

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_PLAIN = (str, bool, int, float)  # the attribute values the bridge sets


def _plain_value(value: Any) -> Any:
    """`value` as a built-in type: a subclass's (an enum's) as its base type's; None for a value
    of any other type. The export child reads built-in types alone, and would refuse the whole
    batch of a span with a value of another type."""
    if type(value) in _PLAIN:
        return value
    for kind in _PLAIN:
        if isinstance(value, kind):
            return kind(value)
    return None


def _plain(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """`attributes` with their values as `_plain_value` gives them, those of no built-in type
    left out."""
    kept = {}
    for key, value in attributes.items():
        plain = _plain_value(value)
        if plain is not None:
            kept[key] = plain
    return kept


_UNSET = Status()


Ended = Callable[["BridgeSpan", int], None]  # takes a span that ended, and its end (ns)


class Spans:
    """The spans of one bridge, and where each goes once ended (`ended`)."""

    __slots__ = ("ended",)

    def __init__(self, ended: Ended) -> None:
        self.ended = ended

    def begin(
        self,
        name: str,
        kind: SpanKind,
        parent: SpanContext | None,
        attributes: Mapping[str, Any] | None,
        trace_id: int | None = None,
        start_time: int | None = None,
    ) -> BridgeSpan:
        """A span of a kept trace, the child of `parent` (a span of this bridge or a caller's),
        else the root of trace `trace_id` (a new one when None), begun at `start_time` (ns since
        the epoch; now when None). The values of `attributes` are strings, booleans and numbers
        (an enum's as its base type's; any other
        is left out)."""
        if parent is not None:
            trace_id, state = parent.trace_id, parent.trace_state
        else:
            trace_id, state = trace_id or random.getrandbits(128) or 1, None
        context = SpanContext(trace_id, random.getrandbits(64) or 1, False, _SAMPLED, state)
        return BridgeSpan(
            self,
            name,
            context,
            parent,
            kind,
            _plain(attributes) if attributes else {},
            start_time or time.time_ns(),
        )


class BridgeSpan(Span):
    """A span being recorded; `end` hands it to the span processor. Made and used on one thread
    (the event loop's), as the bridge's spans are."""

    __slots__ = ("attributes", "context", "kind", "name", "parent", "spans", "start", "status")

    def __init__(
        self,
        spans: Spans,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        start: int,
    ) -> None:
        self.spans: Spans | None = spans  # None once ended
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.attributes = attributes
        self.start = start
        self.status: Status | None = None

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.spans is not None

    def set_attribute(self, key: str, value: Any) -> None:
        plain = _plain_value(value)
        if self.spans is not None and plain is not None:
            self.attributes[key] = plain

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def update_name(self, name: str) -> None:
        if self.spans is not None:
            self.name = name

    def set_status(self, status: Status | Any, description: str | None = None) -> None:
        if self.spans is not None:
            self.status = status if isinstance(status, Status) else Status(status, description)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        """Events are not recorded."""

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        """Exceptions are not recorded: a failed span has `error.type` and status `ERROR`."""

    def end(self, end_time: int | None = None) -> None:
        spans = self.spans
        if spans is not None:
            self.spans = None
            spans.ended(self, end_time or time.time_ns())


def handed_to(processor: SpanProcessor, resource: Resource, scope: InstrumentationScope) -> Ended:
    """Where spans go to an SDK span processor: each as the SDK's `ReadableSpan`."""

    def ended(span: BridgeSpan, end: int) -> None:
        processor.on_end(
            ReadableSpan(
                name=span.name,
                context=span.context,
                parent=span.parent,
                resource=resource,
                attributes=span.attributes,
                kind=span.kind,
                status=span.status or _UNSET,
                start_time=span.start,
                end_time=end,
                instrumentation_scope=scope,
            )
        )

    return ended
