"""The live view's keyboard (S-RUN-5 key, S-APR-1 prompts answered in the view)."""

from __future__ import annotations

import os

import trio

from supervisor.cli._terminal import TerminalConsole
from supervisor.policy._approvals import ApprovalOrigin, ApprovalRequest, QuestionRequest

ORIGIN = ApprovalOrigin(kind="subagent", agent_id="agent_1")


async def test_keys_move_agents_and_answer_prompts() -> None:
    read_fd, write_fd = os.pipe()
    terminal = TerminalConsole()
    moved: list[int] = []
    terminal.on_background = lambda: moved.append(1) or 2
    answers: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(terminal.read_keys, read_fd)
        os.write(write_fd, b"b")  # no prompt: b moves agents
        await trio.testing.wait_all_tasks_blocked()
        assert moved == [1] and "moved 2 agent(s)" in terminal.status

        async def approval() -> None:
            request = ApprovalRequest(
                "s", ORIGIN, "Bash", {"command": "rm x"}, "rm asks", "cleaner"
            )
            answers.append(await terminal.approve(request))

        nursery.start_soon(approval)
        await trio.testing.wait_all_tasks_blocked()
        os.write(write_fd, b"a")  # while a prompt shows, keys answer it
        await trio.testing.wait_all_tasks_blocked()

        async def question() -> None:
            request = QuestionRequest("s", ORIGIN, "Which?", ("main", "dev"), "asker")
            answers.append(await terminal.answer_question(request))

        nursery.start_soon(question)
        await trio.testing.wait_all_tasks_blocked()
        os.write(write_fd, b"b3\x7f2\r")  # "b3", backspace, "2", Enter: the answer "b2"
        await trio.testing.wait_all_tasks_blocked()
        os.close(write_fd)
    os.close(read_fd)
    assert answers == ["allow_always", "b2"]
    assert moved == [1]  # the b typed into the question was not a command


async def _approval_answered_after(writes: list[bytes]) -> list[object]:
    """Write ``writes`` (one read each) while an approval is pending; then type "n"."""
    read_fd, write_fd = os.pipe()
    terminal = TerminalConsole()
    answers: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(terminal.read_keys, read_fd)

        async def approval() -> None:
            request = ApprovalRequest("s", ORIGIN, "Bash", {"command": "rm x"}, "rm asks", "c")
            answers.append(await terminal.approve(request))

        nursery.start_soon(approval)
        await trio.testing.wait_all_tasks_blocked()
        for data in writes:
            os.write(write_fd, data)
            await trio.testing.wait_all_tasks_blocked()
        answers.append("still pending" if not answers else "answered early")
        os.write(write_fd, b"n")
        await trio.testing.wait_all_tasks_blocked()
        os.close(write_fd)
    os.close(read_fd)
    return answers


async def test_s_apr_1_a_terminals_reply_to_a_query_never_answers_an_approval() -> None:
    """An agent's text asks the terminal a question (DECRQM, OSC 11, DA); the reply
    arrives on stdin ending in "y" or "c". None of it answers the pending approval,
    not even split across reads; the person's own key still does."""
    replies = [
        b"\x1b[?2026;2$y",  # DECRQM: mode 2026 is set
        b"\x1b[?2026;",  # the same, split over two reads
        b"2$y",
        b"\x1b]11;rgb:0000/0000/0000\x1b\\",  # OSC 11, ended by ST
        b"\x1b]11;rgb:ffff/ffff/ffff\x07",  # ended by BEL
        b"\x1b[?62;22c",  # DA1
        b"\xc2\x9b?2026;2$y",  # CSI as one C1 character
        b"ya",  # two keys in one read: a paste, not an answer
    ]
    answers = await _approval_answered_after(replies)
    assert answers == ["still pending", "deny"]


async def test_s_apr_1_the_live_approval_shows_the_whole_command_escaped() -> None:
    """The question shows the command that will run, whole, with escapes made visible:
    a cursor move cannot hide ``rm -rf`` behind ``ls``."""
    terminal = TerminalConsole()
    command = "ls -la && rm -rf important\x1b[26D\x1b[K"
    request = ApprovalRequest(
        "s", ORIGIN, "Bash", {"command": command}, "bash 'ls -la' asks", "t\x1b]0;x\x07"
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(terminal.approve, request)
        await trio.testing.wait_all_tasks_blocked()
        assert terminal._prompt is not None
        text = terminal._prompt.text
        terminal.press("n")
    assert "ls -la && rm -rf important\\x1b[26D\\x1b[K" in text
    assert "t\\x1b]0;x\\x07" in text
    assert "\x1b" not in text and "\x07" not in text
