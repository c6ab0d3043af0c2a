"""Where a stdio MCP server starts (S-SEC-3): never by looking up what a subagent wrote.

A workspace-write subagent can write the project and the temp dir; a stdio
server runs unsandboxed at the next start. Each test plants code where a
lookup from the project would find it (a module beside ``python -m``, a
command on a ``PATH`` through the project) and asserts it did not run,
against ``tests/mcp_servers/flood.py``, a small real stdio server.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from supervisor.delegation._mcp import McpHub, McpServerConfig
from supervisor.delegation._mcp_launch import NEUTRAL_DIR, clean_path, server_launch
from tests.support.mcp import FLOOD

VENV_BIN = os.path.dirname(sys.executable)


def _planted(path: Path, marker: Path) -> None:
    """Code that, if it runs, leaves ``marker`` behind (and then serves nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")


async def _where(
    servers: Mapping[str, McpServerConfig], project: Path
) -> tuple[dict[str, str], dict[str, Any]]:
    """Start ``servers`` for ``project``; each connected one's ``where()``, and the failures."""
    hub = McpHub(servers, project_dir=project)
    answers: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        await hub.start(nursery)
        for name in hub.connected:
            result = await hub.call(f"mcp__{name}__where", {})
            answers[name] = json.loads(result.text)
        failures = hub.failures
        await hub.aclose()
    return failures, answers


async def test_a_module_planted_in_the_project_is_not_what_python_m_runs(
    tmp_path: Path,
) -> None:
    """S-SEC-3: ``python -m honest_mcp`` started for a project where a subagent wrote
    ``honest_mcp.py`` runs the installed module, not the planted one, and starts in
    ``/``, where no sandboxed subagent can write."""
    project, lib, marker = tmp_path / "project", tmp_path / "lib", tmp_path / "planted-ran"
    lib.mkdir()
    shutil.copy(FLOOD, lib / "honest_mcp.py")
    _planted(project / "honest_mcp.py", marker)
    server = McpServerConfig(
        command=sys.executable, args=("-m", "honest_mcp"), env={"PYTHONPATH": str(lib)}
    )
    failures, where = await _where({"m": server}, project)
    assert not marker.exists(), "the module a subagent planted in the project ran"
    assert failures == {}
    assert where["m"] == {"cwd": NEUTRAL_DIR, "file": str(lib / "honest_mcp.py")}


async def test_a_command_on_a_path_through_the_project_is_not_run(tmp_path: Path) -> None:
    """S-SEC-3: with the project's ``bin`` first on the server's ``PATH`` (as an
    activated project virtualenv puts it) and a ``python3`` planted there, the server's
    ``python3`` is the one found outside the project."""
    project, marker = tmp_path / "project", tmp_path / "planted-ran"
    fake = project / ".venv" / "bin" / "python3"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    fake.chmod(0o755)
    path = os.pathsep.join([str(fake.parent), VENV_BIN, "/usr/bin", "/bin"])
    server = McpServerConfig(command="python3", args=(str(FLOOD),), env={"PATH": path})
    failures, where = await _where({"p": server}, project)
    assert not marker.exists(), "the python3 a subagent planted on PATH ran"
    assert failures == {} and where["p"]["file"] == str(FLOOD)


async def test_a_command_found_only_in_the_project_is_refused_on_one_line(
    tmp_path: Path,
) -> None:
    """S-SEC-3: a command only the project's ``PATH`` entry holds is not started; the
    one-line failure says where it was not looked and what to do."""
    project = tmp_path / "project"
    tool = project / "bin" / "my-mcp"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    path = os.pathsep.join([str(tool.parent), "/usr/bin", "/bin"])
    server = McpServerConfig(command="my-mcp", env={"PATH": path})
    failures, _ = await _where({"mine": server}, project)
    assert "\n" not in failures["mine"]
    assert "not found on a PATH without the project and the temp dir" in failures["mine"]
    assert "install it elsewhere or give its absolute path" in failures["mine"]


async def test_relative_paths_of_the_command_line_still_name_project_files(
    tmp_path: Path,
) -> None:
    """S-SEC-3: ``server.py``, ``./server.py`` and ``bin/server`` (as a ``.mcp.json``
    names them, relative to the project) still start that file, from ``/``; with
    ``cwd = "."`` (the user's explicit choice) the server runs in the project."""
    project = tmp_path / "project"
    (project / "bin").mkdir(parents=True)
    shutil.copy(FLOOD, project / "server.py")
    script = project / "bin" / "server"
    script.write_text(f"#!{sys.executable}\n" + FLOOD.read_text())
    script.chmod(0o755)
    servers = {
        "bare": McpServerConfig(command=sys.executable, args=("server.py",)),
        "dotted": McpServerConfig(command=sys.executable, args=("./server.py",)),
        "command": McpServerConfig(command="bin/server"),
        "here": McpServerConfig(command=sys.executable, args=("server.py",), cwd="."),
    }
    failures, where = await _where(servers, project)
    assert failures == {}
    in_project = {"cwd": NEUTRAL_DIR, "file": str(project / "server.py")}
    assert where["bare"] == where["dotted"] == in_project
    assert where["command"] == {"cwd": NEUTRAL_DIR, "file": str(script)}
    assert where["here"] == {"cwd": str(project), "file": str(project / "server.py")}


def test_a_dot_argument_names_the_project_not_the_neutral_dir(tmp_path: Path) -> None:
    """S-SEC-3: ``npx server-filesystem .`` serves the project it served before, not
    ``/``; words that are not project paths are passed as written."""
    project = tmp_path / "project"
    project.mkdir()
    config = McpServerConfig(
        command="npx", args=("-y", "@modelcontextprotocol/server-filesystem", ".", "../docs")
    )
    launch = server_launch(config, project, environ_path="/usr/bin")
    assert launch.cwd == NEUTRAL_DIR
    assert launch.args == (
        "-y",
        "@modelcontextprotocol/server-filesystem",
        str(project),
        str(tmp_path / "docs"),
    )


_ENTRY = st.text(st.sampled_from("abc/.~-"), max_size=12)


@given(entries=st.lists(_ENTRY, max_size=8), inside=st.lists(_ENTRY, max_size=4))
def test_no_path_entry_kept_is_relative_or_in_the_project_or_temp_dir(
    entries: list[str], inside: list[str]
) -> None:
    """S-SEC-3, property: whatever ``PATH`` a server would get, every entry kept is
    absolute and outside the project and the temp dir, as written and resolved; every
    other entry is kept, in order."""
    project = Path("/srv/proj")
    temp = tempfile.gettempdir()
    given_path = [
        *entries,
        *(f"{project}/{e}" for e in inside),
        *(f"{temp}/{e}" for e in inside),
        "/usr/bin",
    ]
    kept, dropped = clean_path(os.pathsep.join(given_path), project)
    kept_entries = [e for e in kept.split(os.pathsep) if e]
    for entry in kept_entries:
        assert os.path.isabs(entry)
        for place in (str(project), temp):
            for form in (os.path.normpath(entry), os.path.realpath(entry)):
                assert form != place and not form.startswith(place + "/")
    assert "/usr/bin" in kept_entries
    assert [e for e in given_path if e and e not in dropped] == kept_entries


def test_a_project_reached_through_a_link_is_left_out_of_path(tmp_path: Path) -> None:
    """S-SEC-3: a ``PATH`` entry that reaches the project through a symlink is dropped."""
    project = tmp_path / "project"
    (project / "bin").mkdir(parents=True)
    link = Path(tempfile.mkdtemp(dir="/var/tmp")) / "link"
    try:
        link.symlink_to(project)
        kept, dropped = clean_path(f"{link}/bin{os.pathsep}/usr/bin", project)
    finally:
        shutil.rmtree(link.parent)
    assert kept == "/usr/bin" and dropped == (f"{link}/bin",)


@pytest.mark.parametrize("word", ["-m", "pkg", "/abs/x", ""])
def test_words_that_are_not_project_paths_pass_as_written(tmp_path: Path, word: str) -> None:
    config = McpServerConfig(command="/bin/true", args=(word,))
    assert server_launch(config, tmp_path).args == (word,)


def test_s_sec_3_a_word_through_a_link_and_dotdot_names_what_the_kernel_opens(
    tmp_path: Path,
) -> None:
    """S-SEC-3: ``l/../server.py`` with ``l -> OTHER/sub`` opens ``OTHER/server.py`` from the
    project; started from ``/`` the server is given that file (the one trust resolves and
    hashes), not ``PROJECT/server.py`` (``normpath`` drops ``l/..``), which a subagent may
    rewrite and trust never hashed. The same for ``cwd`` and a relative command."""
    project, other = tmp_path / "project", tmp_path / "other"
    project.mkdir()
    (other / "sub").mkdir(parents=True)
    (other / "server.py").write_text("")
    (project / "server.py").write_text("")
    (project / "l").symlink_to(other / "sub")
    config = McpServerConfig(command=sys.executable, args=("l/../server.py",))
    assert server_launch(config, project).args == (str(other / "server.py"),)
    command = McpServerConfig(command="l/../server.py")
    assert server_launch(command, project).command == str(other / "server.py")
    in_dir = McpServerConfig(command=sys.executable, args=("server.py",), cwd="l/..")
    assert server_launch(in_dir, project).cwd == str(other)
