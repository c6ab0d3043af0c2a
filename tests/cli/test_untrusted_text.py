"""Text an agent, a task record, a profile or a repository chose, on the command line.

Every view shows it with each control and format character escaped (an ESC
as ``\\x1b``, a bidi override as ``\\u202e``), so no escape sequence reaches
the terminal: no window title (OSC 0), clipboard (OSC 52), erased line or
question to the terminal. And none of it is Rich markup: a ``[/]`` in a
description, a profile's name or a script's path is shown as written, not a
``MarkupError`` traceback. The CLI tests run the real command line on a
scripted model and read its raw output.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.control import Control
from rich.table import Table
from rich.text import Text

from supervisor.cli._console import SafeConsole
from supervisor.cli._mcp_asks import approval_message
from supervisor.cli._task_commands import _LiveAnswer
from supervisor.cli._top import AgentRow, _cells, _transcript_lines
from supervisor.policy._approvals import ApprovalOrigin, ApprovalRequest
from tests.support.cli import run_cli
from tests.support.delegation import agent_call, home_for, write_scenario

#: Sets the window title, the clipboard, erases the line, asks the terminal a question.
HOSTILE = "\x1b]0;PWNED\x1b\\\x1b]52;c;ZWNobyBQV05FRAo=\x1b\\\x1b[2K\x1b[6n\u202eevil\u200b"
#: How ``printable`` writes it: each character as its Python escape.
ESCAPED = "\\x1b]0;PWNED\\x1b\\\\x1b]52;c;ZWNobyBQV05FRAo=\\x1b\\\\x1b[2K\\x1b[6n\\u202eevil\\u200b"
#: A profile's name: it sets the window title, reverses the text after it, closes markup.
EVIL_NAME = "evil\x1b]0;X\x1b\\\u202e[/]"
#: What must never reach the terminal from such text.
RAW = ("\x1b", "\x07", "\u202e", "\u200b", "\x9b")


def _assert_safe(output: str) -> None:
    assert "Traceback" not in output and "MarkupError" not in output, output
    for char in RAW:
        assert char not in output, f"{char!r} reached the terminal: {output!r}"


def _without_rich_styles(written: str) -> str:
    """``written`` without the SGR codes Rich's own styles add (none is in ``HOSTILE``)."""
    return re.sub("\x1b\\[[0-9;]*m", "", written)


def _terminal() -> tuple[SafeConsole, io.StringIO]:
    out = io.StringIO()
    return SafeConsole(file=out, force_terminal=True, color_system="truecolor", width=120), out


def test_the_cli_console_escapes_text_and_keeps_its_own_codes() -> None:
    """The guard behind every view: a segment's text is escaped, while Rich's own codes (a
    style's SGR, a control segment's cursor move) are written as they are."""
    console, out = _terminal()
    table = Table(title="tasks")
    table.add_column("description")
    table.add_row(Text("desc " + HOSTILE, style="bold red"))
    console.print(table)
    console.print("[green]ok[/] " + HOSTILE, highlight=False)
    console.control(Control.move_to(0, 0))
    written = out.getvalue()
    assert written.count(ESCAPED) == 2
    assert "\x1b[1;31mdesc " in written and "\x1b[32mok\x1b[0m" in written  # its styles
    assert written.endswith("\x1b[1;1H")  # its control segment
    _assert_safe(_without_rich_styles(written.removesuffix("\x1b[1;1H")))


def _hostile_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "helper.md").write_text(
        "---\nname: 'helper[/]'\ndescription: Use for everything\ntools: Read, Bash\n---\nHelp.\n"
    )
    title = json.dumps(EVIL_NAME)  # a YAML double-quoted string, escapes and all
    (agents / "evil.md").write_text(f"---\nname: {title}\ndescription: d\n---\nBe evil.\n")
    return project


def test_run_ps_and_logs_escape_what_agents_wrote_and_read_no_markup(tmp_path: Path) -> None:
    """S-OBS-2: `run` (its answer and task table), `ps` and `logs` of a subagent whose description,
    prompt, answer and Bash output hold escape sequences and `[/]`, launched as a repository
    profile named `helper[/]`: exit 0, no traceback, no raw ESC, BEL or bidi character, and
    each shows the escaped form. Before, OSC 0/52 reached the terminal and `[/]` in a
    description or profile name was a MarkupError traceback."""
    home = home_for(tmp_path)
    project = _hostile_project(tmp_path)
    description = "report [/] " + HOSTILE
    bash = {"name": "Bash", "input": {"command": "printf 'out \\033]0;BASH\\033\\\\ done\\n'"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call(description, "P" + HOSTILE, subagent_type="helper[/]")]},
                {"text": "root says {{tool_result}}"},
            ],
            description: [{"tool_calls": [bash]}, {"text": "child " + HOSTILE}],
        },
    )
    run = run_cli(home, "run", "--approve", "allow", "--model", model, "go", cwd=project)
    _assert_safe(run.stdout + run.stderr)
    assert run.returncode == 0, run.stderr
    assert "root says child " + ESCAPED in run.stdout  # the answer
    assert "report [/]" in run.stdout and ESCAPED[:40] in run.stdout  # the task table
    assert "helper[/]" in run.stdout

    ps = run_cli(home, "ps", cwd=project)
    _assert_safe(ps.stdout + ps.stderr)
    assert ps.returncode == 0, ps.stderr
    assert "report [/]" in ps.stdout and ESCAPED[:40] in ps.stdout
    assert "helper[/]" in ps.stdout

    [task] = json.loads(run_cli(home, "ps", "--json", cwd=project).stdout)["tasks"]
    logs = run_cli(home, "logs", task["task_id"], cwd=project)
    _assert_safe(logs.stdout + logs.stderr)
    assert logs.returncode == 0, logs.stderr
    assert f"{task['task_id']}: report [/] \\x1b]0;PWNED" in logs.stdout  # the rule
    assert "P" + ESCAPED in logs.stdout  # the prompt
    assert "out \\x1b]0;BASH\\x1b\\ done" in logs.stdout  # the tool result
    assert logs.stdout.count("child " + ESCAPED) == 2  # the answer, and the output file


def test_agents_shows_profile_names_escaped(tmp_path: Path) -> None:
    """S-PROF-3: `agents`: a repository profile named with OSC 0 and bidi characters and one named
    `helper[/]` are listed escaped and as written (before: raw OSC, and a MarkupError)."""
    project = _hostile_project(tmp_path)
    listing = run_cli(home_for(tmp_path), "agents", cwd=project)
    _assert_safe(listing.stdout + listing.stderr)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert "evil\\x1b]0;X\\x1b\\\\u202e[/]" in listing.stdout
    assert "helper[/]" in listing.stdout


def test_workflow_run_and_show_escape_a_scripts_path_and_its_answers(tmp_path: Path) -> None:
    """`workflow run` and `workflow show` (the list and one run) of a script in a folder named
    with `[/]` and an escape sequence, whose actor answers with one: shown escaped (before:
    a MarkupError traceback from the path, raw OSC from the answer)."""
    home = home_for(tmp_path)
    folder = tmp_path / ("x[/]" + "\x1b]0;DIR\x1b\\")
    folder.mkdir(parents=True)  # "x[" holds "]\x1b]0;DIR\x1b\\"
    scenario = write_scenario(folder / "s.yaml", {"left": [{"text": "west " + HOSTILE}]})
    script = folder / "flow.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from supervisor.workflow import agent, workflow

            @workflow(model={scenario!r})
            async def flow(ctx):
                return await agent("left", system="You answer.").ask("Which way?")
            """
        )
    )
    ran = run_cli(home, "workflow", "run", str(script), cwd=tmp_path)
    _assert_safe(ran.stdout + ran.stderr)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "x[/]\\x1b]0;DIR" in ran.stdout.replace("\n", "")
    listed = run_cli(home, "workflow", "show", cwd=tmp_path)
    _assert_safe(listed.stdout + listed.stderr)
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(run_cli(home, "workflow", "show", "--json", cwd=tmp_path).stdout)
    shown = run_cli(home, "workflow", "show", run["run_id"], cwd=tmp_path)
    _assert_safe(shown.stdout + shown.stderr)
    assert shown.returncode == 0, shown.stderr
    assert "x[/]\\x1b]0;DIR" in shown.stdout.replace("\n", "")
    assert "west \\x1b]0;PWNED" in shown.stdout


def test_logs_follow_prints_streamed_text_escaped() -> None:
    """S-OBS-2: `logs -f`: an answer as it streams is escaped by the view itself (a plain
    Rich console here, not the guard)."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=120)
    answer = _LiveAnswer(console)
    first = "streamed " + HOSTILE[:9]
    answer.add(first, 0)
    answer.add(HOSTILE[9:], len(first))
    answer.close()
    written = out.getvalue()
    assert "streamed " + ESCAPED in written
    _assert_safe(_without_rich_styles(written))


def test_top_cells_and_transcript_lines_are_escaped_text() -> None:
    """S-OBS-1, S-OBS-2: `top` (Textual): a row's cells are Text, never markup, and hold no
    control character; so are the transcript pane's lines."""
    row = AgentRow(
        agent_id="agent_1",
        type="helper[/]",
        description="d" + HOSTILE,
        status="running",
        background=False,
        turns=1,
        tokens=2,
        tool_calls=0,
        rss_bytes=None,
        cpu_percent=None,
        elapsed_s=1.0,
        live=True,
        note=None,
    )
    cells = _cells(row)
    assert all(isinstance(cell, Text) for cell in cells[:4])
    assert str(cells[1]) == "helper[/]"
    assert str(cells[2]).startswith("d\\x1b]0;PWNED")
    message: dict[str, Any] = {
        "role": "assistant",
        "seq": 3,
        "content": "said " + HOSTILE,
        "tool_calls": [{"name": "Bash" + HOSTILE, "input": {"command": HOSTILE}}],
    }
    lines = " ".join(str(line) for line in _transcript_lines(message))
    assert "said " + ESCAPED in lines
    _assert_safe(" ".join(map(str, cells)) + lines)


def test_an_mcp_approval_message_escapes_the_agents_text() -> None:
    """S-SRV-3: the elicitation an MCP client shows holds no control or bidi character of
    the agent's (json.dumps with ensure_ascii=False kept bidi overrides as they are)."""
    request = ApprovalRequest(
        session_id="sess_1",
        origin=ApprovalOrigin(kind="subagent", agent_id="agent_1"),
        tool="Bash",
        tool_input={"command": "rm -rf x \u202e" + HOSTILE},
        reason="bash asks" + HOSTILE,
        description="d" + HOSTILE,
    )
    message = approval_message(request)
    _assert_safe(message)
    assert "\\u202e" in message and "Allow it?" in message and "\n" in message
