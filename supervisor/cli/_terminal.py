"""``TerminalConsole``: the keyboard side of ``subvisor run``'s live view.

While the live view is up, one task owns the terminal's input, key by key:
``b`` moves the running foreground subagents to the background (S-RUN-5),
and approvals and questions from any agent (S-APR-1) are answered in the
same view (``y``/``a``/``n`` for an approval, a line of text for a
question). One owner for stdin means a key press can never be split between
the live view and a prompt.

What arrives on stdin is not only keys: a terminal answers queries it finds
in its output (DECRQM ``ESC[?2026$p`` is answered ``ESC[?2026;2$y``), and
agents' text reaches the screen. So escape sequences are dropped whole, even
split across reads (``_KeyFilter``), and an approval takes only a read that
holds exactly one key: a reply's last byte can never answer "y".
"""

from __future__ import annotations

import codecs
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

from ..files._printable import printable
from ..policy._approvals import (
    ApprovalDecision,
    ApprovalRequest,
    QuestionRequest,
    describe_origin,
    view_request,
)

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
        """An approval handler: y (once), a (always, when offered), anything else denies."""
        view = view_request(request)
        always = ", a = always" if view.offers_always else ""
        text = f"{view.text}\nAllow? y = once{always}, n = no"
        answer = await self._ask(_Prompt("approval", text))
        if answer == "y":
            return "allow_once"
        return "allow_always" if answer == "a" and view.offers_always else "deny"

    async def answer_question(self, request: QuestionRequest) -> str:
        """A question handler: a line of text, or the number of an option."""
        options = "".join(f"\n  {i}. {printable(o)}" for i, o in enumerate(request.options, 1))
        who = describe_origin(request.origin, request.description)
        text = f"{who} asks: {printable(request.question, multiline=True)}"
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

    def press_keys(self, keys: list[str]) -> None:
        """Handle the keys of one read: an approval is answered only by a read of one key."""
        prompt = self._prompt
        if prompt is not None and prompt.kind == "approval" and len(keys) != 1:
            return
        for key in keys:
            self.press(key)

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
        keys = _KeyFilter()
        with _cbreak(fd):
            while True:
                await trio.lowlevel.wait_readable(fd)
                data = os.read(fd, 64)
                if not data:
                    return
                self.press_keys(keys.feed(data))


class _KeyFilter:
    """Bytes from a terminal to keys: escape sequences (and any control but
    Enter and Backspace) are dropped, a sequence split across reads included."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")
        # None: between sequences; else what the sequence under way waits for.
        self._state: Literal["esc", "csi", "string", "string_esc", "one"] | None = None

    def feed(self, data: bytes) -> list[str]:
        """The keys in ``data``, given everything fed before."""
        keys: list[str] = []
        for char in self._decoder.decode(data):
            state = self._state
            if state is None:
                if char == "\x1b":
                    self._state = "esc"
                elif char == "\x9b":  # CSI as one C1 character
                    self._state = "csi"
                elif char in _C1_STRINGS:
                    self._state = "string"
                elif char.isprintable() or char in _ENTER or char in _BACKSPACE:
                    keys.append(char)
            elif state == "esc":
                self._state = (
                    "csi"
                    if char == "["
                    else "string"
                    if char in "]P_^X"
                    else "one"
                    if char in "O()*+#%"
                    else None
                )
            elif state == "csi":
                if "\x40" <= char <= "\x7e":
                    self._state = None  # the final byte ends it
            elif state == "one":
                self._state = None
            elif state == "string":  # OSC, DCS, APC, PM, SOS: to BEL or ST
                if char in ("\x07", "\x9c"):
                    self._state = None
                elif char == "\x1b":
                    self._state = "string_esc"
            else:  # string_esc: ESC then backslash is ST; anything else goes on with the string
                self._state = None if char == "\\" else "string"
        return keys


#: C1 characters that open a string ended by ST (DCS, SOS, OSC, PM, APC).
_C1_STRINGS = frozenset("\x90\x98\x9d\x9e\x9f")


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
