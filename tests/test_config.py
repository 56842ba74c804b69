"""Config: interpolation, mcpServers, and errors that name the file, the field and the fix."""

from __future__ import annotations

import pytest

from bridge.config import ConfigError, load_config, parse_config
from bridge.upstream import register_kind
from tests.fakes import FakeUpstream

register_kind("fake", FakeUpstream)


def write(tmp_path, text, name="bridge.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(exc: ConfigError) -> dict[str, tuple[str, str]]:
    return {p: (what, fix) for p, what, fix in exc.problems}


def test_env_interpolation_with_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("SVC_NAME", "alpha")
    monkeypatch.delenv("MISSING_PORT", raising=False)
    cfg = load_config(
        write(
            tmp_path,
            "server: {port: '${MISSING_PORT:-9090}'}\nupstreams:\n  - {name: '${SVC_NAME}', kind: fake}\n",
        )
    )
    assert cfg.server.port == 9090
    assert cfg.upstreams[0].name == "alpha"
    assert cfg.upstreams[0].base_dir == str(tmp_path.resolve())


def test_missing_env_var_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    with pytest.raises(ConfigError) as err:
        load_config(
            write(tmp_path, "upstreams:\n  - {name: a, kind: fake, tags: ['${NOPE_TOKEN}']}\n")
        )
    assert "upstreams[0].tags[0]" in problems(err.value)
    assert "NOPE_TOKEN" in str(err.value)


def test_unknown_key_suggests_closest(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(
            write(tmp_path, "upstreams:\n  - {name: a, kind: fake, timout: 3}\nservr: {}\n")
        )
    found = problems(err.value)
    assert found["upstreams[0].timout"][1] == "did you mean `timeout`?"
    assert found["servr"][1] == "did you mean `server`?"
    text = str(err.value)
    assert str(tmp_path / "bridge.yaml") in text and "fix:" in text


def test_wrong_types_and_missing_fields_name_their_path(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(
            write(
                tmp_path,
                "upstreams:\n  - {name: a, kind: fake}\n  - {name: b, kind: fake}\n  - {kind: fake, timeout: soon}\nserver: {port: 99999}\n",
            )
        )
    found = problems(err.value)
    assert "upstreams[2].name" in found and found["upstreams[2].name"][0] == "is required"
    assert "upstreams[2].timeout" in found
    assert "server.port" in found


def test_unknown_kind_and_duplicate_names(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(
            write(
                tmp_path,
                "upstreams:\n  - {name: a, kind: opnapi}\n  - {name: b, kind: fake}\n  - {name: b, kind: fake}\n",
            )
        )
    found = problems(err.value)
    assert found["upstreams[0].kind"][1] == "did you mean `openapi`?"
    assert "already used" in found["upstreams[2].name"][0]


def test_syntax_errors_and_missing_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "upstreams: [\n"))
    assert "line" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, '{"upstreams": [}', name="b.json"))
    assert "JSON" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "absent.yaml")
    assert "file not found" in str(err.value)


def test_a_key_given_twice_a_file_not_utf8_and_upstreams_not_a_list_are_named(tmp_path):
    # a second `store:` once replaced the first silently; the others answered a traceback
    cases = [
        (
            write(tmp_path, 'store: {path: ":memory:"}\nstore: {path: x.db}\n'),
            "",
            "line 2, column 1: the key 'store' is given twice",
        ),
        (
            write(tmp_path, '{"store": {"path": ":memory:"}, "store": {}}', name="b.json"),
            "",
            "the key 'store' is given twice",
        ),
        (
            write(tmp_path, "upstreams:\n  - {name: a, kind: fake, name: b}\n", name="c.yaml"),
            "",
            "the key 'name' is given twice",
        ),
        (write(tmp_path, "upstreams: 5\n", name="d.yaml"), "upstreams", "must be a list"),
    ]
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"store: {}\n# caf\xe9\n")
    cases.append((latin, "", "is not UTF-8 text (byte 0xe9 on line 2)"))
    for path, where, said in cases:
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert said in problems(err.value)[where][0] and str(path) in str(err.value), err.value
    # a mapping's own key may still override one merged in with `<<`
    merged = load_config(
        write(
            tmp_path,
            'store: {path: ":memory:"}\nupstreams:\n  - &a {name: a, kind: fake}\n'
            "  - <<: *a\n    name: b\n",
            name="e.yaml",
        )
    )
    assert [u.name for u in merged.upstreams] == ["a", "b"]


def test_a_token_given_twice_or_holding_white_space_is_named():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "server": {
                    "tokens": [
                        {"token": "abcdefgh"},
                        {"token": "abcdefgh"},
                        {"token": "secret-token-1\n"},
                        {"token": "two words"},
                    ]
                }
            }
        )
    found = problems(err.value)
    assert "same token as server.tokens[0]" in found["server.tokens[1].token"][0]
    assert (
        "white space" in found["server.tokens[2].token"][0]
        and "white space" in found["server.tokens[3].token"][0]
    )


def test_surfaces_and_tokens(tmp_path):
    cfg = parse_config(
        {
            "surfaces": [{"name": "ops", "load": "svc__*", "block": {"destructive": True}}],
            "server": {"tokens": [{"token": "t0k3n-abcdef", "surface": "ops"}]},
        }
    )
    assert cfg.surfaces[0].load == ["svc__*"]
    assert cfg.surfaces[0].block[0].destructive is True
    with pytest.raises(ConfigError) as err:
        parse_config({"server": {"tokens": [{"token": "t0k3n-abcdef", "surface": "nope"}]}})
    assert "server.tokens[0].surface" in problems(err.value)


def test_default_surface_must_exist_and_surface_names_are_unique():
    with pytest.raises(ConfigError) as err:
        parse_config({"server": {"default_surface": "ops"}})
    assert "no surface named 'ops'" in problems(err.value)["server.default_surface"][0]
    assert (
        parse_config(
            {"server": {"default_surface": "ops"}, "surfaces": [{"name": "ops"}]}
        ).server.default_surface
        == "ops"
    )
    with pytest.raises(ConfigError) as err:
        parse_config(
            {"surfaces": [{"name": "default", "block": {"destructive": True}}, {"name": "default"}]}
        )
    what, fix = problems(err.value)["surfaces[1].name"]
    assert "already defined at surfaces[0]" in what and "own name" in fix


def test_search_persist_and_its_older_name():
    assert parse_config({}).search.persist is True
    assert parse_config({"search": {"persist": False}}).search.persist is False
    assert (
        parse_config({"search": {"enabled": False}}).search.persist is False
    )  # the older spelling
    with pytest.raises(ConfigError) as err:
        parse_config({"search": {"enabled": False, "persist": True}})
    assert "older name of `persist`" in str(err.value)


def test_a_typo_in_a_rule_mapping_is_named_alone():
    with pytest.raises(ConfigError) as err:
        parse_config({"surfaces": [{"name": "x", "block": {"destructve": True}}]})
    assert problems(err.value) == {
        "surfaces[0].block[0].destructve": (
            "unknown key `destructve`",
            "did you mean `destructive`?",
        )
    }


def test_retry_delays_in_the_wrong_order_name_the_fix():
    with pytest.raises(ConfigError) as err:
        parse_config({"upstreams": [{"name": "a", "kind": "fake", "retry_initial": 60}]})
    what, fix = problems(err.value)["upstreams[0]"]
    assert (
        what == "retry_initial (60 s) is longer than retry_max (30 s)"
        and "retry_initial the shorter" in fix
    )


def test_mcp_servers_block_shape_is_accepted_up_to_the_kind():
    # the mcpServers block becomes `kind: mcp` upstreams; a bad transport is named
    with pytest.raises(ConfigError) as err:
        parse_config({"mcpServers": {"files": {"type": "carrier-pigeon", "command": "x"}}})
    assert "mcpServers.files.type" in problems(err.value)
    cfg = parse_config(
        {
            "mcpServers": {
                "my files": {
                    "type": "stdio",
                    "transport": "stdio",
                    "command": "x",
                    "disabled": True,
                    "description": "ignored",
                }
            }
        }
    )
    assert (cfg.upstreams[0].name, cfg.upstreams[0].kind, cfg.upstreams[0].enabled) == (
        "my_files",
        "mcp",
        False,
    )
    bad = {
        "mcpServers.a.transport": {
            "type": "stdio",
            "transport": "http",
            "command": "x",
        },  # they disagree
        "mcpServers.b.transport": {
            "transport": "sse",
            "url": "http://127.0.0.1:1/sse",
        },  # named where written
        "mcpServers.c.type": {
            "type": "stdio",
            "url": "http://127.0.0.1:1/mcp",
        },  # stdio without a command
        "mcpServers.d.kind": {"kind": "openapi", "command": "x"},  # always an MCP server
        "mcpServers.e.disabled": {"command": "x", "disabled": "false"},  # a string is not a flag
    }
    with pytest.raises(ConfigError) as err:
        parse_config({"mcpServers": {path.split(".")[1]: entry for path, entry in bad.items()}})
    assert set(bad) <= set(problems(err.value))


def test_errors_never_echo_secret_values():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "upstreams": [{"name": "a", "kind": "fake", "tags": {"token": "hunter2-secret"}}],
                "server": {"tokens": [{"token": 12345678901, "surface": "default"}]},
            }
        )
    assert "hunter2" not in str(err.value) and "12345678901" not in str(err.value)


def test_a_value_read_from_the_environment_is_never_shown(monkeypatch):
    # a secret in a field whose name says nothing of it: `port: "${API_TOKEN}"`
    monkeypatch.setenv("API_TOKEN", "hunter2-secret")
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "server": {"port": "${API_TOKEN}", "host": "${NOT_SET_HERE:-x}"},
                "upstreams": [{"name": "a", "kind": "fake", "max_concurrency": "x${API_TOKEN}"}],
            }
        )
    assert "hunter2" not in str(err.value)
    assert "a value read from the environment, not shown" in problems(err.value)["server.port"][0]


def test_legacy_sse_transport_is_refused_with_a_fix():
    with pytest.raises(ConfigError) as err:
        parse_config({"mcpServers": {"old": {"type": "sse", "url": "http://127.0.0.1:1/sse"}}})
    what, fix = problems(err.value)["mcpServers.old.type"]
    assert "not supported" in what and "type: http" in fix


def test_a_reference_that_is_no_reference_is_named_and_a_literal_is_written_twice(monkeypatch):
    monkeypatch.setenv("X_A", "${not a reference}")  # a value read is taken as it is
    assert (
        parse_config({"server": {"public_url": "${X_A}/a$${X_A}"}}).server.public_url
        == "${not a reference}/a${X_A}"
    )
    for written in ("${UNSET_P", "${1BAD}", "${A-B}"):
        with pytest.raises(ConfigError) as err:
            parse_config({"server": {"public_url": f"https://x/{written}"}})
        what, fix = problems(err.value)["server.public_url"]
        assert f"holds {written!r}" in what and "$${ for a literal ${" in fix


def test_a_problem_in_one_section_does_not_hide_the_checks_across_sections():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "server": {"port": 99999, "default_surface": "ops"},
                "surfaces": [{"name": "a"}, {"name": "a"}],
                "base_dir": "/elsewhere",
            }
        )
    assert {"server.port", "server.default_surface", "surfaces[1].name", "base_dir"} <= set(
        problems(err.value)
    )


def test_the_three_spellings_of_streamable_http_agree_and_a_kind_in_capitals_is_suggested():
    cfg = parse_config(
        {
            "mcpServers": {
                "a": {
                    "type": "http",
                    "transport": "streamableHttp",
                    "url": "http://127.0.0.1:1/mcp",
                }
            }
        }
    )
    assert cfg.upstreams[0].kind == "mcp"
    with pytest.raises(ConfigError) as err:
        parse_config({"upstreams": [{"name": "a", "kind": "MCP", "command": "x"}]})
    assert problems(err.value)["upstreams[0].kind"][1] == "did you mean `mcp`?"


def test_aliases_of_aliases_expanding_past_a_million_values_are_refused_at_once(tmp_path):
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for prev, name in zip("abcdefg", "bcdefgh", strict=True):  # 10 ** 8 values from eight lines
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "\n".join(lines) + "\n"))
    assert "expands to more than 1,000,000 values" in problems(err.value)[""][0]


def test_a_flag_where_a_number_goes_is_refused():
    with pytest.raises(ConfigError) as err:
        parse_config({"server": {"port": True}})  # pydantic alone reads it as port 1
    assert "port is true, a flag where a number goes" in problems(err.value)["server"][0]


def test_each_kinds_own_refusals_say_the_fix_and_other_errors_point_to_the_kinds_page():
    entries = [
        ("upstreams[0]", {"name": "a", "kind": "a2a"}, "base_url"),
        (
            "upstreams[1].url",
            {"name": "b", "kind": "a2t", "url": "localhost:9103"},
            "http://127.0.0.1:9103",
        ),
        ("upstreams[2].command", {"name": "c", "kind": "atip", "command": []}, "argv list"),
        (
            "upstreams[3].answers[0]",
            {"name": "d", "kind": "atip", "command": "x", "answers": [{"commands": ["x"]}]},
            "flags: [--yes]",
        ),
        (
            "upstreams[4].auth[0]",
            {"name": "e", "kind": "openapi", "spec": "x.yaml", "auth": {"type": "bearer"}},
            "`token:`",
        ),
        ("upstreams[5]", {"name": "f", "kind": "mcp"}, "`command: ...`"),
        (
            "upstreams[6]",
            {"name": "g", "kind": "mcp", "command": "x", "headers": {"A": "b"}},
            "remove `headers`",
        ),
        (
            "upstreams[7].ping_timeout",
            {"name": "h", "kind": "mcp", "command": "x", "ping_timeout": 0},
            "see docs/upstreams/mcp.md",
        ),
        (
            "upstreams[8].timeout",
            {"name": "i", "kind": "mcp", "command": "x", "timeout": 0},
            "see docs/config.md",
        ),
    ]
    with pytest.raises(ConfigError) as err:
        parse_config({"upstreams": [entry for _, entry, _ in entries]})
    found = problems(err.value)
    for path, _, needle in entries:
        what, fix = found[path]
        assert needle in fix and not what.startswith("Value error"), (path, what, fix)


def test_an_unknown_key_of_an_mcp_servers_entry_lists_the_keys_it_may_take():
    with pytest.raises(ConfigError) as err:
        parse_config({"mcpServers": {"files": {"command": "x", "zzz": 1}}})
    fix = problems(err.value)["mcpServers.files.zzz"][1]
    assert "command" in fix and "name," not in fix and "kind," not in fix


def test_port_0_in_a_url_needs_launch_and_a_loopback_host(tmp_path):
    launch = "launch: {command: python, args: [-m, bridge.demo.a2t_server]}"
    with pytest.raises(ConfigError) as err:
        load_config(
            write(tmp_path, "upstreams:\n  - {name: a, kind: a2t, url: 'http://127.0.0.1:0'}\n")
        )
    what, fix = problems(err.value)["upstreams[0]"]
    assert "`url` names port 0" in what and "launch" in fix
    with pytest.raises(ConfigError) as err:
        load_config(
            write(
                tmp_path,
                f"upstreams:\n  - {{name: a, kind: a2t, url: 'http://10.0.0.5:0', {launch}}}\n",
            )
        )
    what, fix = problems(err.value)["upstreams[0]"]
    assert "not this machine's loopback" in what and "127.0.0.1" in fix
    config = load_config(
        write(
            tmp_path,
            f"upstreams:\n  - {{name: a, kind: a2t, url: 'http://localhost:0', {launch}}}\n",
        )
    )
    assert config.upstreams[0].port_zero_urls() == ["url"]
