"""Settings from config.toml and subvisor.toml (DESIGN "State"; S-POL-2 rules from [permission])."""

from __future__ import annotations

import hashlib
import json
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.cli._trust import trust_command
from supervisor.config._config_files import ConfigError, load_settings, project_trust_requests
from supervisor.config._project_trust import TrustGate, TrustRequest, UntrustedProjectError


def _home_and_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """An empty subvisor home (``SUBVISOR_HOME``) and an empty project beside it."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    return home, project


def _assert_refused_naming_both_files(raised: Any, home: Path, project: Path) -> str:
    """The refusal's message, once it names the project file and the user's config."""
    message = str(raised.value)
    assert str(project / "subvisor.toml") in message
    assert str(home / "config.toml") in message
    return message


def test_project_config_overrides_user_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, project = _home_and_project(tmp_path, monkeypatch)
    (home / "config.toml").write_text('model = "openai:gpt-4o-mini"\nmax_turns = 9\n')
    (project / "subvisor.toml").write_text(
        'max_turns = 6\npermission_mode = "plan"\n'
        '[permission]\n"*" = "allow"\nbash = { "*" = "allow", "rm *" = "deny" }\n'
        '[gateway.providers.ollama]\napi = "openai"\nbase_url = "http://localhost:11434/v1"\n'
    )
    # The ollama endpoint waits for trust (S-SEC-3, tests/security/test_project_trust.py).
    settings = load_settings(project, trust=TrustGate("trust-this-run"))
    assert settings.model == "openai:gpt-4o-mini"
    assert settings.max_turns == 6
    assert settings.mode == "plan"
    # The user's rules (here the default), then the project's (S-SEC-3: only tightening).
    assert [(r.permission, r.pattern, r.action) for r in settings.rules] == [
        ("*", "*", "allow"),
        ("*", "*", "allow"),
        ("bash", "*", "allow"),
        ("bash", "rm *", "deny"),
    ]
    assert settings.gateway.providers["ollama"].base_url == "http://localhost:11434/v1"
    assert load_settings(project, trust=TrustGate("trust-this-run"), max_turns=2).max_turns == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_turns = 0", "max_turns"),
        ("colour = 'red'", "colour"),
        ("[permission]\nbash = 'sometimes'", "permission 'bash'"),
        ("subagent_depth = 2", "subagent_depth"),
        ("max_turns = ", "is not valid TOML"),
        # S-MCP-1: `a__b` + `c` and `a` + `b__c` would both be mcp__a__b__c.
        ('[mcp_servers.a__b]\ncommand = "x"', "mcp_servers.a__b"),
    ],
)
def test_bad_config_is_a_clear_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text(text + "\n")
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings(tmp_path)
    assert "subvisor.toml" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('permission_mode = "bypassPermissions"', "permission_mode = 'bypassPermissions'"),
        ('permission_mode = "yolo"', "permission_mode = 'yolo'"),
        ('[sandbox]\nmode = "full"', "sandbox.mode = 'full'"),
        ('[sandbox]\nnetwork = "allow"', "sandbox.network = 'allow'"),
        ('[sandbox]\non_unsupported = "warn"', "sandbox.on_unsupported = 'warn'"),
        # S-SBX-1, S-SEC-1: a socket file (Docker's) is root on the host; "true" is coerced.
        ("[sandbox]\nallow_unix_sockets = true", "sandbox.allow_unix_sockets"),
        ('[sandbox]\nallow_unix_sockets = "true"', "sandbox.allow_unix_sockets"),
    ],
)
def test_project_config_may_not_lift_the_users_protections_s_sbx_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, named: str
) -> None:
    """S-SBX-3: what a repository's subvisor.toml may not do, the user's config.toml may."""
    home, project = _home_and_project(tmp_path, monkeypatch)
    (project / "subvisor.toml").write_text(text + "\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(project)
    assert named in _assert_refused_naming_both_files(raised, home, project)
    (project / "subvisor.toml").unlink()
    (home / "config.toml").write_text(text + "\n")
    load_settings(project)  # the user's own config may


def test_project_config_may_tighten_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text(
        '[sandbox]\nmode = "read-only"\nnetwork = "deny"\non_unsupported = "error"\n'
        "allow_unix_sockets = false\n"
    )
    settings = load_settings(tmp_path)
    assert (settings.sandbox.mode, settings.sandbox.network) == ("read-only", "deny")
    assert not settings.sandbox.allow_unix_sockets


@pytest.mark.parametrize("key", ["force_mode", "force_network"])
def test_run_flag_only_sandbox_keys_are_refused_in_config_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    (home / "config.toml").write_text(f'[sandbox]\n{key} = "full"\n')
    with pytest.raises(ConfigError, match=f"sandbox.{key} is set by `subvisor run"):
        load_settings(tmp_path)


# -- S-SEC-3: a project's config may only tighten limits ------------------------------

#: Each cap a project may lower, with the smallest value its validator takes.
_CAP_KEYS: list[tuple[tuple[str, ...], int]] = [
    (("max_concurrent_subagents",), 1),
    (("max_subagents_per_session",), 1),
    (("max_turns",), 1),
    (("root_max_turns",), 1),
    (("root_max_notification_calls",), 0),
    (("subagent_depth",), 0),
    (("subagent_limits", "memory_mb"), 1),
    (("subagent_limits", "cpu_seconds"), 1),
    (("subagent_limits", "address_space_mb"), 1),
    (("subagent_limits", "open_files"), 17),
    (("subagent_limits", "wall_timeout_s"), 1),
    (("subagent_limits", "idle_timeout_s"), 1),
    (("subagent_limits", "max_processes"), 1),
    (("subagent_limits", "file_size_mb"), 1),
    (("subagent_limits", "cpus"), 1),
    (("gateway", "max_concurrency"), 1),
    (("gateway", "max_retries"), 0),
    (("gateway", "backoff_max_s"), 0),
    (("gateway", "retry_after_max_s"), 0),
    (("event_budget", "max_events"), 1),
    (("event_budget", "max_event_mb"), 1),
]


def test_every_cap_of_the_config_is_in_the_property() -> None:
    """The property below covers every cap the project check knows (none forgotten)."""
    from supervisor.config._config_files import _CAPS

    assert {key for key, _ in _CAP_KEYS} == set(_CAPS)


def _toml(key: tuple[str, ...], value: int) -> str:
    table = f"[{key[0]}]\n" if len(key) == 2 else ""
    return f"{table}{key[-1]} = {value}\n"


@st.composite
def _cap_case(draw: st.DrawFn) -> tuple[tuple[str, ...], int, int]:
    key, lowest = draw(st.sampled_from(_CAP_KEYS))
    highest = 1 if key == ("subagent_depth",) else 10**6
    values = st.integers(min_value=lowest, max_value=highest)
    return key, draw(values), draw(values)


@settings(max_examples=60, deadline=None)
@given(case=_cap_case())
def test_s_sec_3_a_project_cap_is_taken_only_at_or_below_the_users(
    case: tuple[tuple[str, ...], int, int],
) -> None:
    """S-SEC-3: for every numeric cap, a project value is accepted iff it is at most the
    user's; a larger one is refused naming the key, the file and the user's config."""
    key, user_value, project_value = case
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        home.mkdir()
        project.mkdir()
        patch.setenv("SUBVISOR_HOME", str(home))
        (home / "config.toml").write_text(_toml(key, user_value))
        (project / "subvisor.toml").write_text(_toml(key, project_value))
        if project_value <= user_value:
            in_force: Any = load_settings(project)
            for part in key:
                in_force = getattr(in_force, part)
            assert in_force == project_value
            return
        with pytest.raises(ConfigError) as raised:
            load_settings(project)
        message = str(raised.value)
        assert f"{'.'.join(key)} = {project_value}" in message
        assert str(project / "subvisor.toml") in message
        assert str(home / "config.toml") in message
        assert "\n" not in message


@settings(max_examples=40, deadline=None)
@given(
    key=st.sampled_from([key for key, _ in _CAP_KEYS]),
    written=st.one_of(
        st.integers(min_value=0, max_value=10**9).map(lambda n: f'"{n}"'),
        st.sampled_from(["true", "false", "[1]", '"1e9"', '"inf"', "{ n = 1 }"]),
    ),
)
def test_s_sec_3_a_project_cap_that_is_not_a_number_is_refused(
    key: tuple[str, ...], written: str
) -> None:
    """S-SEC-3: a cap written as a string (``max_turns = "100000"``), a bool or a table
    is refused in one line naming the key and the file, whatever the user's cap: left
    to validation, "100000" became a number after the check and lifted the cap."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        home.mkdir()
        project.mkdir()
        patch.setenv("SUBVISOR_HOME", str(home))
        table = f"[{key[0]}]\n" if len(key) == 2 else ""
        (project / "subvisor.toml").write_text(f"{table}{key[-1]} = {written}\n")
        with pytest.raises(ConfigError) as raised:
            load_settings(project)
        message = str(raised.value)
        assert f"{'.'.join(key)} = " in message and "not a number" in message
        assert str(project / "subvisor.toml") in message and "\n" not in message


def test_s_sec_3_project_caps_compare_with_the_defaults_and_flags_still_lift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a user config the defaults are in force; the command line is the user's."""
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text("max_concurrent_subagents = 100000\n")
    with pytest.raises(ConfigError, match=r"above the 20 in force.*--max-concurrent-subagents"):
        load_settings(tmp_path)
    (tmp_path / "subvisor.toml").write_text("max_concurrent_subagents = 2\n")
    assert load_settings(tmp_path).max_concurrent_subagents == 2
    assert load_settings(tmp_path, max_concurrent_subagents=50).max_concurrent_subagents == 50


def test_s_sec_3_a_partial_limits_table_keeps_the_other_caps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lowering idle_timeout_s in a project must not drop the default memory cap."""
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text("[subagent_limits]\nidle_timeout_s = 60\n")
    limits = load_settings(tmp_path).subagent_limits
    assert (limits.idle_timeout_s, limits.memory_mb) == (60, 2048)


def test_s_sec_3_home_cannot_come_from_a_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    (tmp_path / "subvisor.toml").write_text(f'home = "{tmp_path / "elsewhere"}"\n')
    with pytest.raises(ConfigError, match=r"sets home: .*SUBVISOR_HOME"):
        load_settings(tmp_path)
    (tmp_path / "subvisor.toml").unlink()
    (home / "config.toml").write_text(f'home = "{tmp_path / "elsewhere"}"\n')
    assert load_settings(tmp_path).home == tmp_path / "elsewhere"  # the user's config may


# -- S-SEC-3: what waits for trust, and what leave-out keeps --------------------------


def test_s_sec_3_leave_out_drops_only_what_waits_for_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands that start nothing (agents, workflow show) see the rest of the file."""
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text(
        "max_turns = 3\n"
        '[mcp_servers.tool]\ncommand = "tool-server"\n'
        '[gateway.providers.openai]\nbase_url = "http://127.0.0.1:9/v1"\n'
        "[gateway.providers.anthropic]\nstreaming = false\n"
    )
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"other": {"command": "x"}}}')
    settings = load_settings(tmp_path, trust=TrustGate("leave-out"))
    assert settings.max_turns == 3
    assert settings.mcp_servers == {}
    assert settings.gateway.providers["openai"].base_url is None
    assert settings.gateway.providers["anthropic"].streaming is False  # harmless: kept
    everything = load_settings(tmp_path, trust=TrustGate("trust-this-run"))
    assert set(everything.mcp_servers) == {"tool", "other"}
    assert everything.gateway.providers["openai"].base_url == "http://127.0.0.1:9/v1"


def test_s_dist_1_a_project_file_moves_agents_to_a_cluster_only_once_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3, S-DIST-1: the cluster's machines would see every prompt: trust first."""
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text('placement = "ray"\nray_address = "10.0.0.5:6379"\n')
    with pytest.raises(UntrustedProjectError):
        load_settings(tmp_path)
    [request] = project_trust_requests(tmp_path)
    assert any("Ray cluster at 10.0.0.5:6379" in detail for detail in request.details)
    kept = load_settings(tmp_path, trust=TrustGate("leave-out"))
    assert (kept.placement, kept.ray_address) == ("local", "auto")
    trusted = load_settings(tmp_path, trust=TrustGate("trust-this-run"))
    assert (trusted.placement, trusted.ray_address) == ("ray", "10.0.0.5:6379")
    # The command line's --ray is the user's own choice: no trust needed.
    (tmp_path / "subvisor.toml").unlink()
    flagged = load_settings(tmp_path, placement="ray", ray_address="auto")
    assert flagged.placement == "ray"


def test_s_sec_3_a_file_with_nothing_to_trust_needs_no_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text(
        "max_turns = 3\n[gateway.providers.openai]\nread_timeout_s = 30\n"
    )
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {}}')
    assert load_settings(tmp_path).max_turns == 3  # the default gate refuses untrusted files
    assert project_trust_requests(tmp_path) == ()


def test_s_sec_3_trust_is_bound_to_the_exact_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grant is kept 0600 in the user's home; one changed byte asks again."""
    home = tmp_path / "home"
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    mcp_json = tmp_path / ".mcp.json"
    mcp_json.write_text('{"mcpServers": {"s": {"command": "server", "args": ["a"]}}}')
    asked: list[bool] = []

    def yes(request: TrustRequest, changed: bool) -> bool:
        asked.append(changed)
        return True

    assert set(load_settings(tmp_path, trust=TrustGate(ask=yes)).mcp_servers) == {"s"}
    assert set(load_settings(tmp_path).mcp_servers) == {"s"}  # recorded: no question
    assert asked == [False]
    store = home / "trusted.json"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    (entry,) = json.loads(store.read_text())["files"]
    assert (entry["path"], entry["workdir"]) == (str(mcp_json), str(Path.cwd()))
    mcp_json.write_text('{"mcpServers": {"s": {"command": "server", "args": ["b"]}}}')
    with pytest.raises(UntrustedProjectError, match="changed since you trusted it"):
        load_settings(tmp_path)
    load_settings(tmp_path, trust=TrustGate(ask=yes))
    assert asked == [False, True]


def test_s_sec_3_the_summary_escapes_what_could_redraw_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names, commands and env names come from the file: control characters are shown
    escaped, and env values are never shown."""
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "ok\x1b[2K": {
                        "command": "evil\rgood",
                        "args": ["\u202eflip"],
                        "env": {"TOKEN": "value-never-shown"},
                    }
                }
            }
        )
    )
    (request,) = project_trust_requests(tmp_path)
    shown = "\n".join(request.details) + request.effect()
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "\\x1b[2K" in shown and "\\r" in shown and "\\u202e" in shown
    assert "TOKEN" in shown and "value-never-shown" not in shown


def test_s_sec_3_a_symlinked_file_is_trusted_under_its_own_name_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """S-SEC-3: a `.mcp.json` symlinked to a trusted file is not trusted through it (its
    relative commands would run elsewhere); the error names it as found, which is what
    `subvisor trust` then takes; retargeting it to other content asks again."""
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    good, project = tmp_path / "good", tmp_path / "project"
    good.mkdir()
    project.mkdir()
    (good / ".mcp.json").write_text('{"mcpServers": {"s": {"command": "server"}}}')
    (tmp_path / "b.json").write_text('{"mcpServers": {"s": {"command": "other"}}}')
    assert trust_command(good / ".mcp.json") == 0
    (project / ".mcp.json").symlink_to("../good/.mcp.json")
    with pytest.raises(UntrustedProjectError, match=r"subvisor trust \S*project/\.mcp\.json`"):
        load_settings(project)
    assert trust_command(project / ".mcp.json") == 0
    assert "trusted" in capsys.readouterr().out
    assert set(load_settings(project).mcp_servers) == {"s"}
    (project / ".mcp.json").unlink()
    (project / ".mcp.json").symlink_to(tmp_path / "b.json")
    with pytest.raises(UntrustedProjectError, match="changed since you trusted it"):
        load_settings(project)


def test_s_sec_3_trust_is_bound_to_the_directory_commands_run_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3: a `.mcp.json` trusted while the supervisor ran in one directory asks again
    in another, where its relative `server.py` is another file (the same file, bytes
    and project directory: only the directory changed)."""
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / ".mcp.json").write_text(
        '{"mcpServers": {"s": {"command": "python3", "args": ["server.py"]}}}'
    )
    monkeypatch.chdir(project)
    assert set(load_settings(project, trust=TrustGate(ask=lambda _, __: True)).mcp_servers)
    assert set(load_settings(project).mcp_servers) == {"s"}  # recorded for this directory
    monkeypatch.chdir(elsewhere)
    with pytest.raises(UntrustedProjectError, match="is not trusted") as raised:
        load_settings(project)
    assert f"relative paths are from {elsewhere}" in "\n".join(raised.value.request.details)


def test_s_sec_3_a_trust_entry_of_the_old_store_asks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3: entries of version 1 (keyed by the resolved path alone, no directory) do
    not match: the file asks again, and a new grant replaces the old store."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    content = b'{"mcpServers": {"s": {"command": "server"}}}'
    (tmp_path / ".mcp.json").write_bytes(content)
    digest = hashlib.sha256(content).hexdigest()
    old = {str(tmp_path / ".mcp.json"): {"sha256": digest, "trusted_at": 1.0}}
    (home / "trusted.json").write_text(json.dumps({"version": 1, "files": old}))
    with pytest.raises(UntrustedProjectError, match="is not trusted"):
        load_settings(tmp_path)
    assert trust_command(tmp_path) == 0
    assert json.loads((home / "trusted.json").read_text())["version"] == 2
    assert set(load_settings(tmp_path).mcp_servers) == {"s"}


# -- S-SEC-3: a project's permission rules and mode may only tighten ------------------


@pytest.mark.parametrize(
    ("user", "project", "refused"),
    [
        ("", 'permission_mode = "acceptEdits"', "permission_mode = 'acceptEdits'"),
        ("", 'permission_mode = "bypass"', "permission_mode = 'bypass'"),
        ('permission_mode = "plan"', 'permission_mode = "default"', "permission_mode"),
        ('permission_mode = "plan"', 'permission_mode = "dontAsk"', "permission_mode"),
        ('permission_mode = "dontAsk"', 'permission_mode = "plan"', "permission_mode"),
        ("", '[sandbox]\nmode = "workspace-write"', "sandbox.mode = 'workspace-write'"),
        ('[sandbox]\nmode = "read-only"', '[sandbox]\nmode = "workspace-write"', "sandbox.mode"),
        ("", 'plugin_dirs = ["plugins/x"]', "plugin_dirs"),
        (
            '[permission]\n"*" = "allow"\nexternal_directory = "deny"',
            '[permission]\nexternal_directory = { "/tmp/*" = "allow" }',
            "external_directory '/tmp/*' = 'allow'",
        ),
        ('[permission]\nbash = "deny"', '[permission]\nbash = { "git *" = "ask" }', "'git *'"),
        (
            '[permission]\n"*" = "allow"\nbash = { "rm *" = "ask" }',
            '[permission]\nbash = { "rm -rf *" = "allow" }',
            "'rm -rf *' = 'allow', looser than bash 'rm *' = 'ask'",
        ),
        ('[permission]\n"*" = "ask"', '[permission]\nedit = "allow"', "edit '*' = 'allow'"),
        (
            'permission = [{ permission = "bash", action = "allow" }]',
            '[permission]\nread = "allow"',
            "of the default",
        ),
    ],
)
def test_s_sec_3_a_project_may_not_loosen_the_mode_rules_or_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str, project: str, refused: str
) -> None:
    """S-SEC-3: a project mode that approves more than the user's (or the default), a wider
    sandbox, plugin dirs (their profiles may lift both), or a rule that answers less
    strictly than the user's rules (or the default ask) is refused on one line naming
    the file, the key and the user's config."""
    home, project_dir = _home_and_project(tmp_path, monkeypatch)
    (home / "config.toml").write_text(user + "\n")
    load_settings(project_dir)  # the user's config alone is fine
    (project_dir / "subvisor.toml").write_text(project + "\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(project_dir)
    message = _assert_refused_naming_both_files(raised, home, project_dir)
    assert refused in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("user", "project"),
    [
        ("", 'permission_mode = "plan"'),
        ("", 'permission_mode = "dontAsk"'),
        ('permission_mode = "acceptEdits"', 'permission_mode = "default"'),
        ('[sandbox]\nmode = "workspace-write"', '[sandbox]\nmode = "workspace-write"'),
        ('[permission]\nbash = "deny"', '[permission]\nbash = { "*" = "deny", "git *" = "deny" }'),
        ('[permission]\nbash = "ask"', '[permission]\nbash = { "git *" = "ask" }'),
        (
            '[permission]\nbash = { "*" = "ask", "git *" = "allow" }',
            '[permission]\nbash = { "*" = "deny", "git *" = "allow" }',
        ),
        (
            '[permission]\n"*" = "allow"\nbash = { "rm *" = "deny" }',
            '[permission]\nbash = { "git *" = "allow" }',
        ),
    ],
)
def test_s_sec_3_a_project_may_tighten_the_mode_and_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str, project: str
) -> None:
    """S-SEC-3 (control): what approves no more than the user's config is taken."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    (home / "config.toml").write_text(user + "\n")
    (tmp_path / "subvisor.toml").write_text(project + "\n")
    load_settings(tmp_path)


_NAMES = st.sampled_from(["*", "bash", "edit", "read"])
_PATTERNS = st.sampled_from(["*", "git *", "git status", "g?t *", "rm *", "rm -rf *", "*.py"])
_RULES = st.lists(
    st.tuples(_NAMES, _PATTERNS, st.sampled_from(["allow", "ask", "deny"])), max_size=4
)
_CALLS = [
    (name, subject)
    for name in ("bash", "edit", "read", "webfetch")
    for subject in ("git", "git status", "gut x", "rm -rf /", "rm x", "a.py", "other")
]
_STRICT = {"allow": 0, "ask": 1, "deny": 2}


def _rules_toml(rules: list[tuple[str, str, str]]) -> str:
    items = ", ".join(
        f"{{ permission = {json.dumps(p)}, pattern = {json.dumps(q)}, action = {json.dumps(a)} }}"
        for p, q, a in rules
    )
    return f"permission = [{items}]\n"


@settings(max_examples=80, deadline=None)
@given(user_rules=_RULES, project_rules=_RULES)
def test_s_sec_3_project_rules_never_answer_less_strictly_than_the_users(
    user_rules: list[tuple[str, str, str]], project_rules: list[tuple[str, str, str]]
) -> None:
    """S-SEC-3: for any user and project rules, either the project file is refused, or
    every call is answered at least as strictly as the user's rules alone answer it,
    and as strictly as the project's own rules where one of them matches."""
    from supervisor.policy._rules import evaluate, last_matching_rule

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        home.mkdir()
        project.mkdir()
        patch.setenv("SUBVISOR_HOME", str(home))
        (home / "config.toml").write_text(_rules_toml(user_rules))
        alone = load_settings(project).rules
        (project / "subvisor.toml").write_text(_rules_toml(project_rules))
        try:
            rules = load_settings(project).rules
        except ConfigError as exc:
            assert "may only tighten" in str(exc)
            assert any(action != "deny" for *_, action in project_rules)  # a deny never is
            return
        assert rules[: len(alone)] == alone  # the user's rules first, then the project's
        for name, subject in _CALLS:
            answer = evaluate(rules, name, subject)
            assert _STRICT[answer] >= _STRICT[evaluate(alone, name, subject)]
            theirs = last_matching_rule(rules[len(alone) :], name, subject)
            if theirs is not None:
                assert _STRICT[answer] >= _STRICT[theirs.action]
