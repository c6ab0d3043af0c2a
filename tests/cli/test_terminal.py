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
