"""Settings from config.toml and subvisor.toml (DESIGN "State"; S-POL-2 rules from [permission])."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor._config_files import ConfigError, load_settings


def test_project_config_overrides_user_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    (home / "config.toml").write_text('model = "openai:gpt-4o-mini"\nmax_turns = 6\n')
    (project / "subvisor.toml").write_text(
        'max_turns = 9\npermission_mode = "acceptEdits"\n'
        '[permission]\n"*" = "allow"\nbash = { "*" = "allow", "rm *" = "deny" }\n'
        '[gateway.providers.ollama]\napi = "openai"\nbase_url = "http://localhost:11434/v1"\n'
    )
    settings = load_settings(project)
    assert settings.model == "openai:gpt-4o-mini"
    assert settings.max_turns == 9
    assert settings.mode == "acceptEdits"
    assert [(r.permission, r.pattern, r.action) for r in settings.rules] == [
        ("*", "*", "allow"),
        ("bash", "*", "allow"),
        ("bash", "rm *", "deny"),
    ]
    assert settings.gateway.providers["ollama"].base_url == "http://localhost:11434/v1"
    assert load_settings(project, max_turns=2).max_turns == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_turns = 0", "max_turns"),
        ("colour = 'red'", "colour"),
        ("[permission]\nbash = 'sometimes'", "permission 'bash'"),
        ("subagent_depth = 2", "subagent_depth"),
        ("max_turns = ", "cannot read"),
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
    ],
)
def test_project_config_may_not_lift_the_users_protections_s_sbx_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, named: str
) -> None:
    """S-SBX-3: what a repository's subvisor.toml may not do, the user's config.toml may."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    monkeypatch.setenv("SUBVISOR_HOME", str(home))
    (project / "subvisor.toml").write_text(text + "\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(project)
    message = str(raised.value)
    assert named in message
    assert str(project / "subvisor.toml") in message
    assert str(home / "config.toml") in message
    (project / "subvisor.toml").unlink()
    (home / "config.toml").write_text(text + "\n")
    load_settings(project)  # the user's own config may


def test_project_config_may_tighten_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "home"))
    (tmp_path / "subvisor.toml").write_text(
        '[sandbox]\nmode = "read-only"\nnetwork = "deny"\non_unsupported = "error"\n'
    )
    settings = load_settings(tmp_path)
    assert (settings.sandbox.mode, settings.sandbox.network) == ("read-only", "deny")


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
