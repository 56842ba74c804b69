"""Background work of tool search stepping aside for the searches running
(bridge.search.foreground)."""

from __future__ import annotations

import threading

from bridge.search.foreground import Foreground
from tests.search.support import hits, indexed


def test_a_search_running_holds_back_background_work_for_a_while_at_most():
    """`Foreground.pause` waits while a search runs (background work steps aside for it), and
    no longer than `most` seconds (a steady stream of searches slows that work, never stops it)."""

    from bridge.search.foreground import Foreground

    patient = Foreground(most=10.0)
    paused = threading.Event()
    answers: list[bool] = []

    def background():
        answers.append(patient.pause())
        paused.set()

    assert patient.pause()  # no search runs: at once
    with patient.running():
        worker = threading.Thread(target=background)
        worker.start()
        assert not paused.wait(0.3)  # still waiting for the search to end
    assert paused.wait(10) and answers == [True]
    worker.join(10)
    hasty = Foreground(most=0.01)
    with hasty.running():
        assert not hasty.pause()  # the search still runs: the work goes on after `most`


def test_a_compaction_steps_aside_while_a_search_runs(tmp_path, monkeypatch):
    """Between steps of 64 tools, a compaction (Python work, holding the interpreter's lock as a
    search does) waits for the searches running to end."""

    import bridge.search.index as si

    monkeypatch.setattr("bridge.search.compaction.COMPACT_SEGMENTS", 2)
    monkeypatch.setattr("bridge.search.compaction.COMPACT_MIN_TOOLS", 10)
    converted: list[str] = []
    compacting, stepped = threading.Event(), threading.Event()

    def convert(tool_id: str):
        if compacting.is_set():
            converted.append(tool_id)
            if len(converted) == 64:
                stepped.set()
        return indexed(tool_id, f"report number {tool_id}")

    foreground = Foreground(most=10.0)
    index = si.ToolIndex(str(tmp_path / "aside.index"), convert=convert, foreground=foreground)
    try:
        for first in (0, 100):
            index.submit([f"t{i}" for i in range(first, first + 100)])
            assert index.flush()
        with foreground.running():
            compacting.set()
            index.compact([f"t{i}" for i in range(200)])
            assert stepped.wait(10)
            assert not index.compacted(0.3) and len(converted) == 64  # waiting for the search
        assert index.compacted(30) and len(converted) == 200 and index.segments == 1
        assert hits(index, "report number t150")[:1] == ["t150"]
    finally:
        index.close()
