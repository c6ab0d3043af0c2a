"""``TerminalConsole``: the keyboard side of ``subvisor run``'s live view.

While the live view is up, one task owns the terminal's input, key by key:
``b`` moves the running foreground subagents to the background (S-RUN-5),
and approvals and questions from any agent (S-APR-1) are answered in the
same view (``y``/``a``/``n`` for an approval, a line of text for a
question). One owner for stdin means a key press can never be split between
the live view and a prompt.
"""

from __future__ import annotations

import contextlib
import os
import termios
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import trio
from rich.console import Group, RenderableType
from rich.text import Text

from ..policy._approvals import ApprovalDecision, ApprovalRequest, QuestionRequest, describe_origin

__all__ = ["TerminalConsole"]

_ENTER = {"\r", "\n"}
_BACKSPACE = {"\x7f", "\b"}


@dataclass
class _Prompt:
    kind: Literal["approval", "question"]
    text: str
    options: tuple[str, ...] = ()
    typed: list[str] = field(default_factory=list)
    answer: str | None = None
    answered: trio.Event = field(default_factory=trio.Event)


class TerminalConsole:
    """Reads keys for the live view and answers approvals and questions in it."""

    def __init__(self) -> None:
        #: Called on ``b``; returns how many agents moved. Set once the session exists.
        self.on_background: Callable[[], int] = lambda: 0
        self._prompt: _Prompt | None = None
        self._lock = trio.Lock()
        self.status = "keys: b = move running foreground agents to the background"

    async def approve(self, request: ApprovalRequest) -> ApprovalDecision:
        """An approval handler: y (once), a (always), anything else denies."""
        text = (
            f"{describe_origin(request.origin, request.description)} wants to run "
            f"{request.tool}: {request.reason}\nAllow? y = once, a = always, n = no"
        )
        answer = await self._ask(_Prompt("approval", text))
        if answer == "y":
            return "allow_once"
        return "allow_always" if answer == "a" else "deny"

    async def answer_question(self, request: QuestionRequest) -> str:
        """A question handler: a line of text, or the number of an option."""
        options = "".join(f"\n  {i}. {o}" for i, o in enumerate(request.options, 1))
        text = f"{describe_origin(request.origin, request.description)} asks: {request.question}"
        answer = await self._ask(_Prompt("question", text + options, request.options))
        if answer.isdigit() and 1 <= int(answer) <= len(request.options):
            return request.options[int(answer) - 1]
        return answer

    async def _ask(self, prompt: _Prompt) -> str:
        async with self._lock:  # one question on screen at a time
            self._prompt = prompt
            try:
                await prompt.answered.wait()
            finally:
                self._prompt = None
        return prompt.answer or ""

    def press(self, key: str) -> None:
        """Handle one key (public for tests: the reader feeds it)."""
        prompt = self._prompt
        if prompt is None:
            if key == "b":
                moved = self.on_background()
                self.status = f"moved {moved} agent(s) to the background"
            return
        if prompt.kind == "approval":
            prompt.answer = key.lower()
            prompt.answered.set()
        elif key in _ENTER:
            prompt.answer = "".join(prompt.typed).strip()
            prompt.answered.set()
        elif key in _BACKSPACE:
            if prompt.typed:
                prompt.typed.pop()
        elif key.isprintable():
            prompt.typed.append(key)

    def renderable(self, above: RenderableType) -> RenderableType:
        """The live view: ``above`` (the task table), then a prompt or the key help."""
        prompt = self._prompt
        if prompt is None:
            return Group(above, Text(self.status, style="dim"))
        line = Text(prompt.text, style="bold yellow")
        if prompt.kind == "question":
            line.append("\n> " + "".join(prompt.typed), style="bold")
        return Group(above, line)

    async def read_keys(self, fd: int) -> None:
        """Own ``fd`` (a terminal) in cbreak mode and feed its keys to ``press``."""
        with _cbreak(fd):
            while True:
                await trio.lowlevel.wait_readable(fd)
                data = os.read(fd, 64)
                if not data:
                    return
                for key in data.decode("utf-8", errors="ignore"):
                    self.press(key)


@contextlib.contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one by one, unechoed; the terminal is restored on the way out."""
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield  # not a terminal (a test's pipe): nothing to set
        return
    tty.setcbreak(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
