"""The searches running now, and the background work of tool search (a compaction of the index,
the semantic stages' embeddings) that steps aside for them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["PAUSE_MOST", "Foreground"]

# the longest a unit of background work (64 tools of a compaction, a batch of embeddings) waits
# for the searches running to end (`Foreground.pause`)
PAUSE_MOST = 0.05


class Foreground:
    """The searches running now, and the background work that steps aside for them.

    A compaction (every tool converted and written again) and the semantic stage's embeddings
    are Python work: they hold the interpreter's lock as a search does. A search that shares it
    with them gives it up at each call into numpy or Tantivy and waits for a switch interval to
    have it back; right after a 100,000-tool catalog became searchable, searches took 21 to 27 ms
    (p50) while both ran, against 2 ms once they were done. Before each unit of its work, such
    a thread calls `pause()`: it waits while a search runs, at most `most` seconds, so a steady
    stream of searches slows it down but never stops it."""

    def __init__(self, most: float = PAUSE_MOST) -> None:
        self.most = most
        self._running = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around a search."""
        with self._cond:
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                if not self._running:
                    self._cond.notify_all()

    def pause(self) -> bool:
        """Wait while a search runs, at most `most` seconds; True when none runs now."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running, self.most)
