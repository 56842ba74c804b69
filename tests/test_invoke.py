"""The invocation pipeline: every outcome is a result envelope with the right error class."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bridge.catalog import Catalog
from bridge.config import InvokeConfig, SurfaceConfig
from bridge.invoke import Invoker
from bridge.model import BridgeError, UpstreamResult, now_iso
from bridge.store import Store
from bridge.surface import Surfaces
from tests.fakes import FakeConfig, FakeUpstream, tool


@pytest.fixture
async def world():
    store = Store()
    catalog = Catalog(store)
    up = FakeUpstream(
        FakeConfig(name="svc", timeout=0.5),
        tools=[
            tool("echo", props={"text": {"type": "string"}}, required=["text"]),
            tool("wipe", destructive=True),
            tool("drop_inferred", native_id="drop_inferred"),
            tool("secret", blocked_reason="credential_missing"),
            tool(
                "keyed",
                blocked_reason="credential_missing",
                blocked_detail="the agent requires credentials the config does not give: "
                "bearer (http Bearer: set auth.bearer_token or auth.schemes.bearer)",
            ),
        ],
    )
    # inferred destructive: a fact the bridge guessed never denies on its own
    up.tools[2].safety.destructive = True
    up.tools[2].safety.sources["destructive"] = "inferred"
    catalog.add_upstream(up)
    down = FakeUpstream(FakeConfig(name="down", fail_start="connection refused", retry_initial=30))
    catalog.add_upstream(down)
    surfaces = Surfaces(
        [
            SurfaceConfig(name="ops", allow_destructive=True),
            SurfaceConfig(name="ro", read_only=True),
        ],
        catalog,
    )
    invoker = Invoker(
        catalog, surfaces, store, InvokeConfig(inline_result_limit=1000, preview_chars=100)
    )
    await catalog.start()
    yield catalog, invoker, up, store
    await invoker.aclose()
    await catalog.close()


async def test_success_envelope(world):
    catalog, invoker, _up, _ = world
    result = await invoker.invoke("svc__echo", {"text": "hi"})
    assert result.status == "succeeded" and not result.is_error
    assert result.content == [{"type": "text", "text": "hi"}]
    assert result.tool_name == "svc__echo" and result.version == 1
    # resolve by tool_id too
    decl = catalog.resolve("svc__echo")
    again = await invoker.invoke(decl.tool_id, {"text": "x"})
    assert again.content[0]["text"] == "x"


@pytest.mark.parametrize(
    "ref,args,surface,error_class,status",
    [
        ("nope", {}, None, "unknown_tool", "rejected"),
        ("svc__echo", {"text": 5}, None, "invalid_arguments", "rejected"),
        ("svc__echo", {}, None, "invalid_arguments", "rejected"),
        ("svc__wipe", {}, None, "permission_denied", "denied"),
        ("svc__secret", {}, None, "credential_missing", "denied"),
        ("svc__echo", {"text": "x"}, "ro", "unknown_tool", "rejected"),  # hidden, as if missing
        ("svc__echo", {"text": "x"}, "missing-surface", "policy_blocked", "denied"),
    ],
)
async def test_refusals_are_envelopes(world, ref, args, surface, error_class, status):
    _, invoker, up, _ = world
    result = await invoker.invoke(ref, args, surface=surface)
    assert result.is_error and result.error.error_class == error_class and result.status == status
    assert result.content and result.content[0]["type"] == "text"
    assert up.calls == []  # nothing ran


async def test_a_blocked_call_says_what_its_upstream_said_of_the_block(world):
    """The upstream's detail of its reason follows the reason in the refusal; a block the
    surface made for another reason says only that reason."""
    catalog, invoker, up, _ = world
    refused = await invoker.invoke("svc__keyed", {})
    assert refused.error.error_class == "credential_missing" and refused.status == "denied"
    assert refused.error.message == (
        "tool 'svc__keyed' is blocked on this surface (credential_missing): the agent requires credentials "
        "the config does not give: bearer (http Bearer: set auth.bearer_token or auth.schemes.bearer)"
    )
    assert catalog.resolve("svc__keyed").blocked_detail.startswith("the agent requires")
    assert (
        await invoker.invoke("svc__secret", {})
    ).error.message == "tool 'svc__secret' is blocked on this surface (credential_missing)"
    assert up.calls == []


async def test_destructive_allowed_by_surface_and_inferred_never_denies(world):
    _, invoker, _up, _ = world
    assert not (await invoker.invoke("svc__wipe", {}, surface="ops")).is_error
    assert not (await invoker.invoke("svc__drop_inferred", {})).is_error


async def test_timeout_envelope(world):
    _, invoker, up, _ = world
    up.gate = asyncio.Event()
    result = await invoker.invoke("svc__echo", {"text": "slow"})
    assert result.error.error_class == "timeout" and result.status == "timed_out"
    assert result.error.recoverability == "retry"


async def test_upstream_down_envelope_has_retry_after(world):
    catalog, invoker, _, _ = world
    catalog.apply_tools("down", [tool("x")])  # tools known (from an earlier run, say)
    catalog._mark(catalog.slot("down"), "unavailable", "connection refused")
    catalog.slot("down").retry_at = asyncio.get_running_loop().time() + 7
    result = await invoker.invoke("down__x", {})
    assert result.error.error_class == "dependency_unavailable"
    assert 0 < result.error.retry_after <= 7
    assert result.error.recoverability == "retry_later"


async def test_upstream_errors_and_exceptions(world):
    _, invoker, up, _ = world
    up.raise_error = BridgeError("rate limit", error_class="rate_limited", retry_after=3)
    result = await invoker.invoke("svc__echo", {"text": "a"})
    assert result.error.error_class == "rate_limited" and result.error.retry_after == 3
    up.raise_error = RuntimeError("adapter bug")
    result = await invoker.invoke("svc__echo", {"text": "a"})
    assert result.error.error_class == "execution_failed" and "adapter bug" in result.error.message
    up.raise_error = None
    up.result = UpstreamResult(content=[{"type": "text", "text": "boom"}], is_error=True)
    result = await invoker.invoke("svc__echo", {"text": "a"})
    assert (
        result.is_error
        and result.error.error_class == "execution_failed"
        and result.content[0]["text"] == "boom"
    )


async def test_an_upstreams_secrets_are_masked_in_every_error_it_causes():
    """Whatever the kind, whatever said it: a BridgeError of the adapter, an error result (its
    content, structured content, error and details, persisted when large), an adapter's bug.
    A result that succeeded is the tool's answer, given as it came."""
    secret = "tok-9d1e77ab"
    store = Store()
    catalog = Catalog(store)
    up = FakeUpstream(FakeConfig(name="svc", secret=secret), tools=[tool("echo")])
    catalog.add_upstream(up)
    config = InvokeConfig(inline_result_limit=1000, preview_chars=100)
    invoker = Invoker(catalog, Surfaces([], catalog), store, config)
    await catalog.start()
    try:
        said = f"denied for {secret}"
        up.raise_error = BridgeError(
            said,
            error_class="permission_denied",
            details={"sent": secret},
            native_error_ref={"message": said},
        )
        refused = (await invoker.invoke("svc__echo", {"text": "a"})).model_dump()
        assert secret not in json.dumps(refused) and refused["error"]["message"] == "denied for ***"
        assert refused["error"]["details"] == {"sent": "***"}
        assert refused["content"][0]["text"].endswith("denied for ***")

        up.raise_error = RuntimeError(said)
        bug = await invoker.invoke("svc__echo", {"text": "a"})
        assert bug.error.message == "RuntimeError: denied for ***"

        up.raise_error = None
        long_text = said + " " + "x" * 2000
        up.result = UpstreamResult(
            content=[{"type": "text", "text": long_text}],
            structured_content={secret: said},
            is_error=True,
        )
        failed = await invoker.invoke("svc__echo", {"text": "a"})
        assert failed.is_error and failed.persisted is not None
        assert failed.error.message.startswith("denied for *** x")
        _, payload = invoker.get_persisted(failed.persisted.persisted_ref["ref"])
        stored = json.loads(payload)
        assert secret not in payload.decode()
        assert stored["structured_content"] == {"***": "denied for ***"}

        up.result = UpstreamResult(content=[{"type": "text", "text": said}])
        assert (await invoker.invoke("svc__echo", {"text": "a"})).content[0]["text"] == said
    finally:
        await invoker.aclose()
        await catalog.close()


async def test_large_result_persisted_and_retrievable(world):
    _, invoker, up, _store = world
    big = "x" * 5000
    up.result = UpstreamResult(
        content=[{"type": "text", "text": big}], structured_content={"rows": [1, 2, 3]}
    )
    result = await invoker.invoke("svc__echo", {"text": "a"})
    assert not result.is_error and result.status == "succeeded"
    assert result.persisted is not None and result.persistence_refs == [
        result.persisted.decision_id
    ]
    ref = result.persisted.persisted_ref["ref"]
    assert len(result.content[0]["text"]) < 1000
    assert result.content[1]["type"] == "resource_link" and result.content[1]["uri"].endswith(ref)
    media, payload = invoker.get_persisted(ref)
    assert media == "application/json"
    stored = json.loads(payload)
    assert stored["content"][0]["text"] == big and stored["structured_content"] == {
        "rows": [1, 2, 3]
    }


async def test_result_too_large(world):
    catalog, _, up, store = world
    invoker = Invoker(
        catalog,
        Surfaces([], catalog),
        store,
        InvokeConfig(inline_result_limit=1000, max_result_chars=2000),
    )
    up.result = UpstreamResult(content=[{"type": "text", "text": "y" * 3000}])
    result = await invoker.invoke("svc__echo", {"text": "a"})
    assert result.error.error_class == "result_too_large" and result.status == "too_large"


async def test_pinned_version_validates_against_its_schema(world):
    catalog, invoker, _up, _ = world
    # v2: compatible (adds optional `lang`)
    catalog.apply_tools(
        "svc",
        [
            tool(
                "echo",
                props={"text": {"type": "string"}, "lang": {"type": "string"}},
                required=["text"],
            )
        ],
    )
    assert catalog.resolve("svc__echo").version == 2
    ok = await invoker.invoke("svc__echo", {"text": "a"}, version=1)
    assert not ok.is_error and ok.version == 1
    # v1's schema did not have `lang` but allowed extra properties; type errors still refused under v1
    bad = await invoker.invoke("svc__echo", {"text": 1}, version=1)
    assert bad.error.error_class == "invalid_arguments"
    # v3: breaking (text renamed to message, required)
    catalog.apply_tools(
        "svc", [tool("echo", props={"message": {"type": "string"}}, required=["message"])]
    )
    pinned = await invoker.invoke("svc__echo", {"text": "a"}, version=1)
    assert pinned.is_error and pinned.error.error_class == "capability_gap"
    assert "breaking change at version 3" in pinned.error.message
    current = await invoker.invoke("svc__echo", {"message": "a"})
    assert not current.is_error and current.version == 3
    missing = await invoker.invoke("svc__echo", {"message": "a"}, version=9)
    assert (
        missing.error.error_class == "unknown_tool"
        and missing.error.error_code == "unknown_version"
    )  # as REST's GET says


async def test_cancellation_propagates_and_is_logged(world):
    _, invoker, up, store = world
    up.gate = asyncio.Event()
    task = asyncio.create_task(
        invoker.invoke("svc__echo", {"text": "a"}, invocation_id="inv_cancel_me")
    )
    async with asyncio.timeout(2):
        while not up.calls:
            await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await invoker.aclose()
    rows = {r["invocation_id"]: r for r in store.recent_invocations()}
    assert rows["inv_cancel_me"]["status"] == "canceled"


async def test_progress_and_invocation_log_without_secrets(world):
    _, invoker, _up, store = world
    seen = []

    async def sink(progress):
        seen.append(progress)

    result = await invoker.invoke("svc__echo", {"text": "s3cr3t-value"}, progress=sink)
    assert not result.is_error
    assert seen and seen[0].invocation_id == result.invocation_id and seen[0].sequence == 1
    await invoker.aclose()
    rows = store.recent_invocations()
    assert rows[0]["invocation_id"] == result.invocation_id and rows[0]["status"] == "succeeded"
    assert rows[0]["duration_ms"] is not None
    assert "s3cr3t-value" not in json.dumps(rows)


async def test_a_burst_of_calls_is_logged_in_few_transactions(world):
    _, invoker, _, store = world
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    try:
        results = [await invoker.invoke("svc__echo", {"text": str(i)}) for i in range(600)]
        await invoker.aclose()
    finally:
        store._db.set_trace_callback(None)
    logged = {r["invocation_id"] for r in store.recent_invocations(limit=1000)}
    assert {r.invocation_id for r in results} <= logged
    # each flush is one transaction, not one per row (the connection is in autocommit mode): one
    # statement of many rows, or a few of them between BEGIN and COMMIT
    inserts = [s for s in statements if s.startswith("INSERT OR REPLACE INTO invocations")]
    assert 1 <= len(inserts) <= 30
    assert sum(s.count("),(") + 1 for s in inserts) == 600
    assert statements.count("BEGIN") == statements.count("COMMIT") <= len(inserts)


async def test_a_full_log_buffer_moves_the_flush_to_now_once(world):
    _, invoker, _, _ = world
    handles = []
    for i in range(600):  # no await: the loop does not run the flush in between
        invoker._log(
            f"inv_{i}", None, None, None, "succeeded", None, now_iso(), time.perf_counter()
        )
        handles.append(invoker._flush_handle)
    assert handles[0] is handles[510] and handles[511] is not handles[510]  # the 512th row moved it
    assert all(h is handles[511] for h in handles[511:])  # and no later row created another timer
    await invoker.aclose()


def test_the_invocation_log_keeps_its_latest_rows():
    store = Store()
    keep = 1000
    for batch in range(10):
        store.log_invocations(
            [
                (
                    f"inv_{batch:02d}_{i:03d}",
                    "t",
                    "svc__echo",
                    1,
                    "default",
                    "succeeded",
                    None,
                    now_iso(),
                    1.0,
                )
                for i in range(300)
            ],
            keep,
        )
    count = store._db.execute("SELECT COUNT(*) FROM invocations").fetchone()[0]
    assert keep <= count <= keep + keep // 10
    ids = {row[0] for row in store._db.execute("SELECT invocation_id FROM invocations")}
    assert "inv_09_299" in ids and "inv_00_000" not in ids  # the oldest went, the latest stay
    # without a limit nothing is dropped
    unbounded = Store()
    unbounded.log_invocations(
        [(f"inv_{i}", "t", "n", 1, "s", "succeeded", None, now_iso(), 1.0) for i in range(3000)]
    )
    assert unbounded._db.execute("SELECT COUNT(*) FROM invocations").fetchone()[0] == 3000


def test_a_store_file_shrinks_once_large_results_are_pruned(tmp_path):
    # SQLite reused the pages of pruned rows but never gave them back: a burst of large results
    # left the file at its largest for good
    path = tmp_path / "bridge.db"
    store = Store(path)
    for i in range(40):
        store.put_result(f"big{i}", f"inv{i}", "text/plain", b"x" * (1 << 20), keep=1000)
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert path.stat().st_size > 40 << 20
    for i in range(30):  # the limit by count drops the large ones
        store.put_result(f"small{i}", f"inv{i}", "text/plain", b"y" * 100, keep=10)
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert (
        path.stat().st_size < 6 << 20
    )  # what is left, and the 4 MB of free pages kept for the next writes
    store.close()
    # the log's prune gives its pages back too
    store = Store(path)
    store.log_invocations(
        [
            (f"inv_{i}", "t", "n" * 2000, 1, "s", "succeeded", None, now_iso(), 1.0)
            for i in range(20000)
        ]
    )
    store.log_invocations(
        [("last", "t", "n", 1, "s", "succeeded", None, now_iso(), 1.0)], keep=1000
    )
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert path.stat().st_size < 10 << 20
    store.close()


async def test_a_wild_version_is_unknown_and_costs_no_log_row(world, caplog):
    _, invoker, _, store = world
    before = await invoker.invoke("svc__echo", {"text": "a"})
    wild = await invoker.invoke("svc__echo", {"text": "a"}, version=2**70)  # past what SQLite holds
    after = await invoker.invoke("svc__echo", {"text": "b"})
    assert wild.error.error_code == "unknown_version"
    await invoker.aclose()
    rows = {r["invocation_id"]: r for r in store.recent_invocations()}
    assert {before.invocation_id, wild.invocation_id, after.invocation_id} <= set(rows)
    assert rows[wild.invocation_id]["version"] is None
    # a row the store cannot hold is dropped alone, with a warning; its batch is kept
    batch = [
        (f"inv_{i}", "t", "n", version, "s", "succeeded", None, now_iso(), 1.0)
        for i, version in enumerate((1, 2**70, 3))
    ]
    store.log_invocations(batch)
    ids = {r["invocation_id"] for r in store.recent_invocations()}
    assert {"inv_0", "inv_2"} <= ids and "inv_1" not in ids
    assert "inv_1" in caplog.text and "cannot be stored" in caplog.text


async def test_an_input_schema_jsonschema_cannot_apply_leaves_the_arguments_to_the_upstream(caplog):
    store = Store()
    catalog = Catalog(store)
    bogus = tool("bogus", props={"a": {"type": "bogus"}})
    odd_required = tool(
        "odd_required",
        props={"a": {"type": "integer"}, "text": {"type": "string", "pattern": "(["}},
    )  # no regex
    dangling = tool("dangling", props={"a": {"$ref": "#/$defs/missing"}})
    up = FakeUpstream(FakeConfig(name="svc"), tools=[bogus, odd_required, dangling])
    catalog.add_upstream(up)
    invoker = Invoker(catalog, Surfaces([], catalog), store)
    await catalog.start()
    try:
        for name in ("svc__bogus", "svc__odd_required", "svc__dangling"):
            for _ in range(2):
                result = await invoker.invoke(name, {"a": 5, "text": "x"})
                assert not result.is_error, (name, result.error)
        assert [call[0] for call in up.calls] == [
            "bogus",
            "bogus",
            "odd_required",
            "odd_required",
            "dangling",
            "dangling",
        ]
        assert caplog.text.count("cannot be applied") == 3  # once a tool
    finally:
        await invoker.aclose()
        await catalog.close()


def test_a_schema_error_shows_a_long_value_by_its_beginning():
    import jsonschema

    from bridge.arguments import schema_errors

    validator = jsonschema.Draft202012Validator(
        {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 5}},
        }
    )
    errors = schema_errors(validator, {"n": "x" * 100_000, "s": "too long"})
    assert (
        errors[0]["path"] == "/n"
        and errors[0]["message"] == f"'{'x' * 59}… (100000 characters) is not of type 'integer'"
    )
    assert errors[1] == {
        "path": "/s",
        "message": "'too long' is too long",
    }  # a short value is shown whole
    nested = schema_errors(validator, {"n": {"k": "v" * 500}})[0]["message"]
    assert nested.endswith("characters as written) is not of type 'integer'") and len(nested) < 200


def test_a_schema_error_writes_null_true_and_false_as_json_does():
    # the caller sent JSON; `None is not of type 'number'` spoke Python to them
    import jsonschema

    from bridge.arguments import schema_errors

    validator = jsonschema.Draft202012Validator(
        {
            "type": "object",
            "properties": {
                "n": {"type": "number"},
                "flag": {"enum": [True, None]},
                "o": {"type": "array"},
                "s": {"const": "None"},
            },
        }
    )
    errors = {
        e["path"]: e["message"]
        for e in schema_errors(
            validator, {"n": None, "flag": False, "o": {"a": [True, None]}, "s": "x"}
        )
    }
    assert errors == {
        "/n": "null is not of type 'number'",
        "/flag": "false is not one of [true, null]",
        "/o": "{'a': [true, null]} is not of type 'array'",
        "/s": "'None' was expected",
    }


async def test_a_tool_found_runnable_is_found_again_until_the_catalog_changes(world):
    """What a surface lets run is decided once per name, and again after any catalog change:
    a tool its upstream now lists as destructive is refused on its next call."""
    catalog, invoker, up, _ = world
    resolved: list[str] = []
    real = invoker._resolve

    def counting(ref, surface):
        resolved.append(ref)
        return real(ref, surface)

    invoker._resolve = counting
    for text in ("a", "b"):
        result = await invoker.invoke("svc__echo", {"text": text})
        assert result.content == [{"type": "text", "text": text}]
    assert resolved == ["svc__echo"]
    bad = await invoker.invoke("svc__echo", {"text": 5})  # still checked each time
    assert bad.error is not None and bad.error.error_class == "invalid_arguments"
    listed = [t for t in up.tools if t.native_id != "echo"]
    catalog.apply_tools("svc", [*listed, tool("echo", destructive=True)])
    refused = await invoker.invoke("svc__echo", {"text": "c"})
    assert refused.error is not None and refused.error.error_class == "permission_denied"
    allowed = await invoker.invoke("svc__echo", {"text": "d"}, surface="ops")
    assert allowed.content == [{"type": "text", "text": "d"}]
    assert resolved == ["svc__echo", "svc__echo", "svc__echo"]
