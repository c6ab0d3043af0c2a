"""What a Bash command line runs and writes, as far as a lexer can tell (S-POL-2, S-SEC-9).

The permission engine checks ``bash`` rules against each simple command a
line runs and ``edit`` rules against each file it writes. This module finds
both without running or expanding anything:

- :func:`split_commands` cuts a line into simple commands at ``;``, ``&``,
  ``|``, newlines and subshells; ``$(...)``, backticks and ``<(...)`` hold
  commands of their own, wherever bash runs them: inside ``${...}``,
  ``$((...))``, ``$[...]``, arrays and unquoted here-document bodies too.
  Each keeps its words as written and its redirections.
- :func:`run_commands` adds, for each command, what it runs through a wrapper
  (``sudo``, ``env``, ``timeout``, ``xargs``, ``sh -c``...; see
  :data:`WRAPPERS`) and each of them spelled three ways: as written, without
  needless quotes (``git "push"`` is ``git push``), and with the program's
  base name (``/bin/rm``, ``\\rm`` and ``$'\\x72m'`` all name ``rm``).

Invariants:

- A command's text (:attr:`SimpleCommand.text`) is its words, then its
  redirections, each ``[fd]operator target``: ``echo x>/etc/passwd`` is
  ``echo x > /etc/passwd``. Every redirection target appears in it, as
  opencode keeps redirections in the text its rules match.
- Unwrapping only adds commands: the command as written is always among them,
  so a caller that denies when any of them is denied cannot be talked out of a
  deny by a wrapper or a spelling.
- It reads a line as bash's parser does, or refuses it: ``<<`` inside
  ``${...}``, ``$[...]`` or ``((...))`` is a shift, not a here-document
  whose body would hide the next lines; ``$((`` that bash reads as ``$( (``
  is read again so; a substitution bash would run between single quotes in
  ``"${...}"`` or arithmetic makes the line too complex.
- Nothing is expanded. Where a variable, substitution, glob, brace, alias,
  function, ``eval "$X"`` or script decides what runs, the lexer sees only the
  text; the sandbox, not this module, is the boundary.
- Bounded: past :data:`MAX_TEXT`, :data:`MAX_COMMANDS`, :data:`MAX_RUN_TEXT`,
  :data:`MAX_REDIRECTS` or :data:`MAX_NESTING` it raises
  :class:`CommandTooComplexError` instead of seeing part of a line, so the work
  for one line is linear in its length.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..kernel import SubvisorError

__all__ = [
    "MAX_COMMANDS",
    "MAX_NESTING",
    "MAX_REDIRECTS",
    "MAX_RUN_TEXT",
    "MAX_TEXT",
    "WRAPPERS",
    "CommandTooComplexError",
    "Redirect",
    "SimpleCommand",
    "Wrapper",
    "bash_commands",
    "program_name",
    "run_commands",
    "split_commands",
    "unquote",
    "word_value",
]


#: Substitutions and subshells nested deeper than this are refused.
MAX_NESTING: Final = 64
#: What :func:`run_commands` goes through for one line at most: characters of the line (no
#: longer line can run: Linux refuses an argument, here ``bash -c``'s, over 128 KiB), different
#: commands, and characters of their texts (words and redirections), each command a wrapper
#: runs included. Each bounds the work of one permission check (S-SEC-9).
MAX_TEXT: Final = 1 << 17
MAX_COMMANDS: Final = 4096
MAX_RUN_TEXT: Final = 1 << 19
#: Redirections one line (or one script a wrapper runs) may hold.
MAX_REDIRECTS: Final = 4096


class CommandTooComplexError(SubvisorError, ValueError):
    """A command line nests or expands beyond what the lexer checks; the message says how far."""


# --- words ---------------------------------------------------------------------------------

_ANSI_C_ESCAPE: Final = re.compile(
    r"\\(?:([abeEfnrtv\\'\"?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})"
    r"|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|c(.))",
    re.DOTALL,
)
_ANSI_C_SIMPLE: Final[Mapping[str, str]] = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}
# A word without any of these means what it says.
_QUOTING: Final = re.compile(r"['\"\\$`<>]")
# What may follow a "$" that expands: a name, a digit, a special parameter, "{" or "(".
_EXPANDS: Final = re.compile(r"[A-Za-z0-9_{(@*#?$!-]")
_VARIABLE: Final = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _ansi_c(match: re.Match[str]) -> str:
    simple, octal, hex_byte, short, long, control = match.groups()
    if simple is not None:
        return _ANSI_C_SIMPLE.get(simple, simple)
    if control is not None:
        return chr(ord(control) & 0x1F)
    number = octal or hex_byte or short or long
    base = 8 if octal else 16
    return chr(min(int(number, base), 0x10FFFF))


def _value(word: str, variables: Mapping[str, str] | None, keep: bool) -> str | None:
    if _QUOTING.search(word) is None:
        return word
    out: list[str] = []
    index, quote = 0, ""
    while index < len(word):
        char = word[index]
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                out.append(char)
            index += 1
            continue
        if quote == "$'":
            escape = _ANSI_C_ESCAPE.match(word, index) if char == "\\" else None
            if escape is not None:
                out.append(_ansi_c(escape))
                index = escape.end()
                continue
            if char == "'":
                quote = ""
            else:
                out.append(char)
            index += 1
            continue
        if char == "\\":
            following = word[index + 1 : index + 2]
            if following == "\n":  # line continuation
                index += 2
            elif quote == '"' and following not in ('"', "\\", "$", "`"):
                out.append(char)
                index += 1
            else:
                out.append(following)
                index += 2
            continue
        if char == '"':
            quote = "" if quote == '"' else '"'
            index += 1
            continue
        if char == "'" and not quote:
            quote = "'"
            index += 1
            continue
        if char == "$" and not quote and word.startswith(("$'", '$"'), index):
            quote = word[index : index + 2].replace('$"', '"')
            index += 2
            continue
        expansion = _expansion_at(word, index, quote)
        if expansion:
            variable = _VARIABLE.match(word, index)
            name = variable and (variable.group(1) or variable.group(2))
            if variable and name and variables is not None and name in variables:
                out.append(variables[name])
                index = variable.end()
                continue
            if not keep:
                return None
            out.append(word[index : index + expansion])
            index += expansion
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _expansion_at(word: str, index: int, quote: str) -> int:
    """The length to copy for an expansion starting at ``index`` (0: none starts there)."""
    char = word[index]
    if char == "`" or (char == "$" and _EXPANDS.match(word, index + 1)):
        return 1
    if char in "<>" and not quote and word.startswith("(", index + 1):
        return 2
    return 0


def word_value(word: str, variables: Mapping[str, str] | None = None) -> str | None:
    """The value ``word`` has once its quoting is removed, or None when an expansion decides it.

    ``'a b'"c"\\d`` is ``a bcd`` and ``$'\\x72m'`` is ``rm``. ``$NAME`` and
    ``${NAME}`` take their value from ``variables`` when it has ``NAME``;
    any other ``$``, a backtick or ``<(``/``>(`` makes the value unknown.
    Globs, braces and ``~`` are left as they are.
    """
    return _value(word, variables, keep=False)


def unquote(word: str) -> str:
    """``word`` with its quoting removed, expansions kept as written: ``"rm $x"`` is ``rm $x``."""
    value = _value(word, None, keep=True)
    assert value is not None  # keep=True never gives up
    return value


def program_name(word: str) -> str:
    """The program ``word`` names: unquoted, a path's base name; as written where expansions decide.

    ``/usr/bin/rm``, ``./rm``, ``"rm"``, ``\\rm`` and ``$'\\x72m'`` all name
    ``rm``. A base name is a guess at what runs (``./rm`` may be any
    program); a caller matches it in addition to the text, never instead.
    """
    value = word_value(word)
    if value is None:
        return word
    return posixpath.basename(value) or value


# --- commands ------------------------------------------------------------------------------

_DUPLICATION: Final = re.compile(r"[0-9]*-?")
_WRITE_OPERATORS: Final[frozenset[str]] = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})


@dataclass(frozen=True, slots=True)
class Redirect:
    """One redirection as written: ``fd`` (``""``, ``"2"``, ``"{name}"``), operator, target."""

    fd: str
    operator: str
    target: str

    @property
    def duplicates(self) -> bool:
        """Whether it copies or closes a file descriptor (``2>&1``, ``>&-``), opening no file."""
        return self.operator in (">&", "<&") and _DUPLICATION.fullmatch(self.target) is not None

    @property
    def writes(self) -> bool:
        """Whether it opens ``target`` to write (``>``, ``>>``, ``>|``, ``&>``, ``<>``, ``>&f``)."""
        if self.operator == ">&":
            return not self.duplicates
        return self.operator in _WRITE_OPERATORS

    @property
    def reads(self) -> bool:
        """Whether it opens ``target`` for reading (``<``, ``<>``)."""
        return self.operator in ("<", "<>")

    @property
    def text(self) -> str:
        """``[fd]operator target``; a duplication has no space (``2>&1``)."""
        if self.duplicates:
            return f"{self.fd}{self.operator}{self.target}"
        return f"{self.fd}{self.operator} {self.target}"


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command: its words as written, then its redirections.

    ``assignments`` are the ``NAME=value`` words written before it: they set the
    environment the program runs in (``PATH=/tmp/evil git``, ``GIT_CONFIG_*``,
    ``LD_PRELOAD``), or, with no words, the shell's own variables.
    """

    words: tuple[str, ...]
    redirects: tuple[Redirect, ...] = ()
    assignments: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """Assignments, words and redirections joined by one space: what ``bash`` rules match."""
        redirects = (redirect.text for redirect in self.redirects)
        return " ".join((*self.assignments, *self.words, *redirects))

    @property
    def program(self) -> str | None:
        """:func:`program_name` of the first word; None for a command of redirections only."""
        return program_name(self.words[0]) if self.words else None

    def written_files(self) -> tuple[str, ...]:
        """Targets as written of the files it writes: redirections, and ``tee``'s arguments."""
        targets = [redirect.target for redirect in self.redirects if redirect.writes]
        if self.program == "tee":
            targets += _operands(self.words[1:])
        return tuple(targets)

    def read_files(self) -> tuple[str, ...]:
        """Targets as written of the files its redirections read (``< file``)."""
        return tuple(redirect.target for redirect in self.redirects if redirect.reads)


def _operands(words: Sequence[str]) -> list[str]:
    """The words that are not options (``-a``), all of them after ``--``."""
    operands: list[str] = []
    options = True
    for word in words:
        value = unquote(word)
        if options and value == "--":
            options = False
        elif not (options and value.startswith("-") and value != "-"):
            operands.append(word)
    return operands


# --- splitting -----------------------------------------------------------------------------

_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_NAMED_FD: Final = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
# Shell words that open or close a compound command, not command names.
_KEYWORDS: Final[frozenset[str]] = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"}
)


# Runs of characters with no meaning to the splitter, copied in one step.
_UNQUOTED_RUN: Final = re.compile(r"[^ \t\n;&|<>()'\"`$\\#]+")
_DOUBLE_QUOTED_RUN: Final = re.compile(r'[^"\\$`]+')
_HEREDOC_RUN: Final = re.compile(r"[^\\$`]+")
_SINGLE_QUOTED_RUN: Final = re.compile(r"[^']+")
# What ends an expansion frame, by kind; "))" ends arithmetic.
_EXPANSION_CLOSERS: Final[Mapping[str, str]] = {"param": "}", "bracket": "]", "array": ")"}
_EXPANSION_OPENERS: Final[Mapping[str, str]] = {"bracket": "[", "array": "("}
# Characters that quote a here-document's delimiter, which then keeps its body unexpanded.
_DELIMITER_QUOTES: Final = frozenset("'\"\\")


@dataclass
class _Frame:
    """One level of text: the top, the inside of ``$(...)``, ``(...)``, or of an expansion.

    ``kind`` is ``cmd`` for command text (the top, ``$(...)``, ``<(...)``, a
    subshell), where operators split commands; in the expansions ``${...}``
    (``param``), ``$((...))`` and ``((...))`` (``arith``), ``$[...]``
    (``bracket``) and ``a=(...)`` (``array``) every character is text (``<<``
    is a shift, not a here-document) except quotes and the substitutions in it.
    """

    closer: str
    # Where a substitution's text starts (its ``$``, backtick or ``<``); -1 for a subshell.
    start: int = -1
    kind: str = "cmd"
    quote: str = ""
    word: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    pending: tuple[str, str] | None = None  # fd and operator waiting for their target
    #: Open ``(`` (arith, array) or ``[`` (bracket) inside the expansion.
    depth: int = 0
    #: A ``${...}`` inside double quotes (or a here-document): its single quotes are text,
    #: so a substitution between them runs.
    dquoted: bool = False
    #: Here-documents registered when it opened: a re-read drops those registered since.
    heredocs_at_open: int = 0


class _Splitter:
    """Splits a command line into simple commands, keeping words and redirections as written.

    A substitution (``$(...)``, backticks, ``<(...)``, one inside ``${...}``,
    ``$((...))``, ``$[...]`` or an unquoted here-document's body) yields its
    commands on their own and stays, as written, in the word that holds it.
    Quoted here-document bodies and comments are dropped.

    Where bash itself decides late what a construct is, the splitter follows:
    ``$((`` and ``((`` are arithmetic when the ``(`` after them closes right
    before a ``)``, as bash's parser decides; otherwise (``$((rm x) )``), and
    when the text ends inside one, the text is read again from there as a
    substitution or subshell. Each start is read again at most once, and the
    nesting limit bounds how many starts hold a character: linear work.
    """

    def __init__(self, text: str, *, nesting: int = 0, heredoc: bool = False) -> None:
        self.text = text
        self.pos = 0
        # A here-document body is text as in double quotes, where '"' is an ordinary character.
        self.stack = [_Frame(closer="", quote="<<" if heredoc else "")]
        self.commands: list[SimpleCommand] = []
        # Delimiter, whether tabs are stripped, whether the body is expanded.
        self.heredocs: list[tuple[str, bool, bool]] = []
        self.redirects = 0
        # The levels of the splitter (a backtick or here-document body) this one reads for.
        self.nesting = nesting
        # Starts of "$((" and "((" read again as "$( (" and "( (".
        self.reread: set[int] = set()

    def run(self) -> list[SimpleCommand]:
        while True:
            while self.pos < len(self.text):
                self._step()
            # Text that ends inside "$((" or "((": bash may read it as "$( (", so read it so.
            unclosed = next((f for f in self.stack if f.kind == "arith"), None)
            if unclosed is None:
                break
            self._read_again(unclosed)
        while self.stack:
            self._close_frame()
        return self.commands

    def _peek(self, offset: int = 1) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def _end_word(self, frame: _Frame) -> None:
        if not frame.word:
            return
        word = "".join(frame.word)
        frame.word = []
        if frame.pending is None:
            frame.words.append(word)
            return
        fd, operator = frame.pending
        frame.pending = None
        self._add_redirect(frame, Redirect(fd, operator, word))
        if operator in ("<<", "<<-"):
            expands = _DELIMITER_QUOTES.isdisjoint(word)
            self.heredocs.append((unquote(word), operator == "<<-", expands))

    def _add_redirect(self, frame: _Frame, redirect: Redirect) -> None:
        self._count_redirects(1)
        frame.redirects.append(redirect)

    def _count_redirects(self, count: int) -> None:
        self.redirects += count
        if self.redirects > MAX_REDIRECTS:
            raise CommandTooComplexError(f"it has more than {MAX_REDIRECTS} redirections")

    def _end_command(self, frame: _Frame) -> None:
        self._end_word(frame)
        frame.pending = None  # an operator with no target is a syntax error: nothing opens
        assignments, words = _strip_prefix(frame.words)
        if words or frame.redirects or assignments:
            self.commands.append(SimpleCommand(words, tuple(frame.redirects), assignments))
        frame.words, frame.redirects = [], []

    def _check_nesting(self) -> None:
        if len(self.stack) + self.nesting > MAX_NESTING:
            raise CommandTooComplexError(
                f"substitutions or subshells nest deeper than {MAX_NESTING} levels"
            )

    def _open(self, frame: _Frame) -> None:
        self._check_nesting()
        self.stack.append(frame)

    def _close_frame(self) -> None:
        frame = self.stack.pop()
        if frame.kind == "cmd" and frame.quote != "<<":  # a body is no command
            self._end_command(frame)
        if frame.start >= 0 and self.stack:
            self.stack[-1].word.append(self.text[frame.start : self.pos + 1])

    def _read_again(self, frame: _Frame) -> None:
        """Reads ``frame`` (an arithmetic one) again from its start as a substitution or subshell.

        What was found inside it stays found: commands only add checks.
        """
        index = next(i for i, f in enumerate(self.stack) if f is frame)
        del self.stack[index:]
        del self.heredocs[frame.heredocs_at_open :]
        self.reread.add(frame.start)
        self.pos = frame.start

    def _sub_split(self, text: str, *, heredoc: bool = False) -> None:
        """Splits ``text`` (a backtick's or a here-document's) and takes its commands."""
        self._check_nesting()
        inner = _Splitter(text, nesting=self.nesting + len(self.stack), heredoc=heredoc)
        self.commands += inner.run()
        self._count_redirects(inner.redirects)

    def _skip_heredocs(self) -> None:
        """Skips the bodies of the here-documents of the line just ended, splitting those
        bash expands: ``$(...)`` and backticks in an unquoted body run."""
        for delimiter, strip_tabs, expands in self.heredocs:
            start = self.pos
            body_end = len(self.text)
            joined = False
            while self.pos < len(self.text):
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end < 0 else end
                line = self.text[self.pos : end]
                line_start, self.pos = self.pos, end + 1
                # In an expanded body a backslash-newline joins lines before the delimiter is
                # looked for: "x\" then "EOF" is the line "xEOF", not the end.
                if not joined and (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    body_end = line_start
                    break
                trailing = len(line) - len(line.rstrip("\\"))
                joined = expands and trailing % 2 == 1
            if expands:
                self._sub_split(self.text[start:body_end], heredoc=True)
        self.heredocs = []

    def _backtick(self, frame: _Frame) -> None:
        """A backtick substitution: bash finds its closing backtick first, as text, then reads
        what lies between with ``\\$``, ``\\``` and ``\\\\`` unescaped (nested backticks)."""
        start = self.pos
        index, out = start + 1, []
        # In double quotes "\\"" is unescaped too; in a here-document or "${...}" it is not.
        unescape = '$`\\"' if frame.kind == "cmd" and frame.quote == '"' else "$`\\"
        while index < len(self.text) and self.text[index] != "`":
            char = self.text[index]
            if char == "\\" and index + 1 < len(self.text):
                following = self.text[index + 1]
                out.append(following if following in unescape else char + following)
                index += 2
                continue
            out.append(char)
            index += 1
        self._sub_split("".join(out))
        self.pos = min(index, len(self.text) - 1)
        frame.word.append(self.text[start : self.pos + 1])
        self.pos += 1

    def _redirect(self, frame: _Frame) -> None:
        # Digits (or {name}) written right before the operator are its file descriptor.
        fd = ""
        if frame.word:
            pending = "".join(frame.word)
            if pending.isdigit() or _NAMED_FD.fullmatch(pending):
                fd, frame.word = pending, []
        self._end_word(frame)
        start = self.pos
        while self._peek(0) in ("<", ">", "&", "|") and self.pos - start < 3:
            self.pos += 1
        operator = self.text[start : self.pos]
        if operator == "<<" and self._peek(0) == "-":
            operator = "<<-"
            self.pos += 1
        if operator in (">&", "<&") and (self._peek(0).isdigit() or self._peek(0) == "-"):
            target_start = self.pos
            while self._peek(0).isdigit():
                self.pos += 1
            if self._peek(0) == "-":
                self.pos += 1
            self._add_redirect(frame, Redirect(fd, operator, self.text[target_start : self.pos]))
            return
        frame.pending = (fd, operator)

    def _copy_run(self, frame: _Frame, run: re.Pattern[str]) -> bool:
        """Copies the characters ``run`` matches at the cursor into the word, if any."""
        match = run.match(self.text, self.pos)
        if match is None:
            return False
        frame.word.append(match.group())
        self.pos = match.end()
        return True

    def _expands_single_quotes(self, frame: _Frame) -> bool:
        """Whether bash expands what lies between single quotes in ``frame``: in arithmetic,
        and in a ``${...}`` inside double quotes, they are text (``"${x:-'$(rm x)'}"``)."""
        return frame.kind == "arith" or (frame.kind == "param" and frame.dquoted)

    def _step(self) -> None:
        frame = self.stack[-1]
        char = self.text[self.pos]
        if frame.quote == "'":
            match = _SINGLE_QUOTED_RUN.match(self.text, self.pos)
            if match is not None:
                if self._expands_single_quotes(frame) and not {"$", "`"}.isdisjoint(match[0]):
                    # bash finds the end past the quotes but expands what they hold.
                    raise CommandTooComplexError(
                        "it has a substitution between single quotes inside ${...} or "
                        "arithmetic, which bash runs"
                    )
                frame.word.append(match.group())
                self.pos = match.end()
                return
        if frame.quote in ("'", "$'"):
            if frame.quote == "$'" and char == "\\":  # $'it\'s'
                frame.word.append(self.text[self.pos : self.pos + 2])
                self.pos += 2
                return
            frame.word.append(char)
            if char == "'":
                frame.quote = ""
            self.pos += 1
            return
        if char == "\\":
            if self._peek() == "\n":  # line continuation
                self.pos += 2
                return
            frame.word.append(self.text[self.pos : self.pos + 2])
            self.pos += 2
            return
        if self._expansion(frame, char):
            return
        if frame.kind != "cmd":
            self._step_expansion(frame, char)
        elif frame.quote in ('"', "<<"):
            if self._copy_run(frame, _DOUBLE_QUOTED_RUN if frame.quote == '"' else _HEREDOC_RUN):
                return
            frame.word.append(char)
            if char == '"' and frame.quote == '"':
                frame.quote = ""
            self.pos += 1
        else:
            self._step_unquoted(frame, char)

    def _expansion(self, frame: _Frame, char: str) -> bool:
        """Opens the substitution or expansion starting at the cursor, if one does."""
        if char == "`":
            self._backtick(frame)
            return True
        if char != "$":
            return False
        following = self._peek()
        if following == "(" and self._peek(2) == "(" and self.pos not in self.reread:
            kind, closer, length = "arith", "))", 3
        elif following == "(":
            kind, closer, length = "cmd", ")", 2
        elif following == "{":
            kind, closer, length = "param", "}", 2
        elif following == "[":
            kind, closer, length = "bracket", "]", 2
        else:
            return False
        dquoted = frame.quote in ('"', "<<") or (frame.kind == "param" and frame.dquoted)
        self._open(
            _Frame(
                closer=closer,
                start=self.pos,
                kind=kind,
                dquoted=dquoted,
                heredocs_at_open=len(self.heredocs),
            )
        )
        self.pos += length
        return True

    def _step_expansion(self, frame: _Frame, char: str) -> None:
        """One character inside ``${...}``, arithmetic, ``$[...]`` or ``a=(...)``: text, but
        for quotes (which hide a closer from bash too) and the frame's own closer."""
        self.pos += 1
        if frame.quote == '"':
            frame.word.append(char)
            if char == '"':
                frame.quote = ""
            return
        if char in ("'", '"'):
            frame.quote = char
        elif char == "$" and self._peek(0) == "'":
            frame.quote = "$'"
            char = "$'"
            self.pos += 1
        elif frame.kind == "arith":
            if char == "(":
                frame.depth += 1
            elif char == ")" and frame.depth:
                frame.depth -= 1
            elif char == ")" and self._peek(0) == ")":
                self._close_frame()  # the cursor is on the second ")"
                self.pos += 1
                return
            elif char == ")":
                # "$((rm x) )": the "(" after "$(" closed, not before a ")": bash reads a
                # substitution (or a subshell for "((") from the start.
                self._read_again(frame)
                return
        elif char == _EXPANSION_CLOSERS[frame.kind]:
            if not frame.depth:
                self.pos -= 1
                self._close_frame()  # the cursor is on the closer
                self.pos += 1
                return
            frame.depth -= 1
        elif char == _EXPANSION_OPENERS.get(frame.kind):
            frame.depth += 1  # "$[a[1]]", "a=((x) y)"; bash does not count "{" in "${"
        frame.word.append(char)

    def _arithmetic_command(self, frame: _Frame) -> bool:
        """Whether ``((`` at the cursor starts an arithmetic command (``(( x = 1<<2 ))``,
        ``for ((...))``): where a command starts, and not already read as subshells."""
        return (
            self.text.startswith("((", self.pos)
            and self.pos not in self.reread
            and not frame.word
            and frame.pending is None
            and all(word in _KEYWORDS or word == "for" for word in frame.words)
        )

    def _step_unquoted(self, frame: _Frame, char: str) -> None:
        if self._copy_run(frame, _UNQUOTED_RUN):
            return
        if char == "$" and self._peek() == "'":
            frame.quote = "$'"
            frame.word.append("$'")
            self.pos += 2
            return
        if char in ("'", '"'):
            frame.quote = char
            frame.word.append(char)
        elif char in ("<", ">") and self._peek() == "(":
            # Process substitution: a command of its own, and a word (or target) of this one.
            self._open(_Frame(closer=")", start=self.pos))
            self.pos += 2
            return
        elif char in ("<", ">") or (char == "&" and self._peek() == ">"):
            self._redirect(frame)
            return
        elif char == "(" and frame.word and frame.word[-1].endswith("="):  # array: a=(1 2)
            self._open(_Frame(closer=")", start=self.pos, kind="array"))
        elif char == "(" and self._arithmetic_command(frame):
            self._open(
                _Frame(
                    closer="))",
                    start=self.pos,
                    kind="arith",
                    heredocs_at_open=len(self.heredocs),
                )
            )
            self.pos += 2
            return
        elif char == "(":
            self._end_command(frame)
            self._open(_Frame(closer=")"))
        elif char == ")":
            if frame.closer == ")":
                self._close_frame()
            else:
                self._end_command(frame)  # e.g. a case pattern "a)"
        elif char == "#" and not frame.word:
            end = self.text.find("\n", self.pos)
            self.pos = len(self.text) if end < 0 else end
            return
        elif char in (" ", "\t"):
            self._end_word(frame)
        elif char in (";", "&", "|", "\n"):
            self._end_command(frame)
            if char == "\n" and self.heredocs:
                self.pos += 1
                self._skip_heredocs()
                return
        else:
            frame.word.append(char)
        self.pos += 1


def _strip_prefix(words: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The variable assignments that lead ``words`` once leading keywords (``then``, ``do``,
    ``{``) are left out, and the words after them."""
    start = 0
    while start < len(words):
        if words[start] in _KEYWORDS:
            start += 1
        elif words[start] == "function":  # "function f { rm x; }": f's body is the command
            start += 2
        else:
            break
    start = min(start, len(words))
    end = start
    while end < len(words) and _ASSIGNMENT.match(words[end]):
        end += 1
    return tuple(words[start:end]), tuple(words[end:])


def split_commands(text: str) -> list[SimpleCommand]:
    """The simple commands of ``text`` in the order they end (a substitution first).

    Leading keywords (``then``, ``do``, ``{``) are left out. Variable
    assignments before a command are kept apart (:attr:`SimpleCommand.assignments`),
    and one of assignments only (``PATH=/tmp/evil``) is a command too: what
    they set decides what the program (or the next one) runs. A command of
    redirections only (``> file``, or those of ``{ ...; } > file``) is kept:
    it opens files.
    """
    return _Splitter(text).run()


# --- wrappers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wrapper:
    """How a program that runs another command takes its options (``sudo -u bob rm x``)."""

    #: Options followed by a value in the next word (``-u bob``).
    value_options: frozenset[str] = frozenset()
    #: Words between the options and the command (``timeout``'s duration).
    operands: int = 0
    #: Whether ``NAME=value`` words may come before the command (``env``, ``sudo``).
    assignments: bool = False
    #: Options whose value is a command line (``env -S 'rm x'``).
    script_options: frozenset[str] = frozenset()
    #: Options with which it runs nothing (``command -v rm``).
    query_options: frozenset[str] = frozenset()
    #: A shell: ``-c`` (alone or in a cluster such as ``-lc``) makes its first operand a script.
    shell: bool = False
    #: It joins its arguments into a command line and runs that (``eval``, ``watch``).
    joins: bool = False
    #: Its first operand is a command line it runs later (``trap 'rm x' EXIT``).
    script_operand: bool = False


def _options(names: str) -> frozenset[str]:
    return frozenset(names.split())


_SHELL: Final = Wrapper(value_options=_options("-o +o -O +O --rcfile --init-file"), shell=True)

#: The programs seen through, by program name: each runs the command after its options.
WRAPPERS: Final[Mapping[str, Wrapper]] = {
    "command": Wrapper(query_options=_options("-v -V")),
    "builtin": Wrapper(),
    "exec": Wrapper(value_options=_options("-a")),
    "env": Wrapper(
        value_options=_options("-u --unset -C --chdir"),
        assignments=True,
        script_options=_options("-S --split-string"),
    ),
    "nice": Wrapper(value_options=_options("-n --adjustment")),
    "nohup": Wrapper(),
    "setsid": Wrapper(),
    "timeout": Wrapper(value_options=_options("-s --signal -k --kill-after"), operands=1),
    "time": Wrapper(value_options=_options("-f --format -o --output")),
    "stdbuf": Wrapper(value_options=_options("-i -o -e --input --output --error")),
    "ionice": Wrapper(value_options=_options("-c --class -n --classdata -p --pid -P --pgid")),
    "xargs": Wrapper(
        value_options=_options(
            "-I -n -P -L -d -E -s -a --max-args --max-procs --max-lines --delimiter --eof"
            " --arg-file --replace --process-slot-var"
        )
    ),
    "sudo": Wrapper(
        value_options=_options(
            "-u --user -g --group -h --host -p --prompt -C --close-from -D --chdir -r --role"
            " -t --type -U --other-user -T --command-timeout"
        ),
        assignments=True,
        query_options=_options("-l --list -v --validate -k -K -V"),
    ),
    "doas": Wrapper(value_options=_options("-u -C")),
    "busybox": Wrapper(),
    "watch": Wrapper(
        value_options=_options("-n --interval -d --differences -q --equexit"), joins=True
    ),
    "eval": Wrapper(joins=True),
    # "flock FILE cmd..." or "flock FILE -c 'cmd'"; options stop at FILE.
    "flock": Wrapper(
        value_options=_options("-w --wait --timeout -E --conflict-exit-code"),
        operands=1,
        script_options=_options("-c --command"),
    ),
    "trap": Wrapper(query_options=_options("-l -p"), script_operand=True),
    # "coproc cmd", or "coproc NAME { cmd; }": both are seen (_runs).
    "coproc": Wrapper(),
    **{name: _SHELL for name in ("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash")},
}
_FIND_EXEC: Final[frozenset[str]] = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# A word that means the same with or without quotes.
_PLAIN: Final = re.compile(r"[A-Za-z0-9_./:@%+=,-]+")


def _script_value(value: str, wrapper: Wrapper) -> str | None:
    """The command line attached to a script option (``-S'rm x'``, ``--split-string=x``), if any."""
    for name in wrapper.script_options:
        if name.startswith("--") and value.startswith(name + "="):
            return value[len(name) + 1 :]
        if not name.startswith("--") and value.startswith(name) and value != name:
            return value[len(name) :]
    return None


class _LazyValues:
    """The unquoted words, each computed when first read: a wrapper reads only its options."""

    def __init__(self, words: tuple[str, ...]) -> None:
        self.words = words
        self.cache: dict[int, str] = {}

    def __getitem__(self, index: int) -> str:
        if index not in self.cache:
            self.cache[index] = unquote(self.words[index])
        return self.cache[index]


def _wrapped(wrapper: Wrapper, words: tuple[str, ...]) -> tuple[str, ...] | str | None:
    """What ``words`` (a wrapper and its arguments) runs: words, a command line, or None."""
    values = _LazyValues(words)
    index, shell_script = 1, False
    while index < len(words):
        value = values[index]
        if value == "--":
            index += 1
            break
        if wrapper.assignments and _ASSIGNMENT.match(value):
            index += 1
            continue
        is_option = (value.startswith("-") and len(value) > 1) or (
            wrapper.shell and value.startswith("+") and len(value) > 1
        )
        if not is_option:
            if value == "-" and wrapper.assignments:  # env -: an empty environment
                index += 1
                continue
            break
        if value in wrapper.query_options:
            return None
        if value in wrapper.script_options:
            return values[index + 1] if index + 1 < len(words) else None
        attached = _script_value(value, wrapper)
        if attached is not None:
            return attached
        if wrapper.shell and not value.startswith("--") and "c" in value[1:]:
            shell_script = True
        index += 2 if value in wrapper.value_options else 1
    while wrapper.assignments and index < len(words) and _ASSIGNMENT.match(values[index]):
        index += 1
    if wrapper.shell:
        return values[index] if shell_script and index < len(words) else None
    if wrapper.script_operand:
        # "trap - INT" and "trap 2" reset signals; anything else is a script run later.
        script = values[index] if index < len(words) else "-"
        return None if script == "-" or script.isdigit() else script
    index += wrapper.operands
    if index < len(words) and values[index] in wrapper.script_options:
        return values[index + 1] if index + 1 < len(words) else None
    if index >= len(words):
        return None
    if wrapper.joins:
        return " ".join(unquote(word) for word in words[index:])
    return words[index:]


def _find_exec(words: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The commands ``find``'s ``-exec``, ``-execdir``, ``-ok`` and ``-okdir`` run."""
    found: list[tuple[str, ...]] = []
    index = 1
    while index < len(words):
        if unquote(words[index]) not in _FIND_EXEC:
            index += 1
            continue
        end = index + 1
        while end < len(words) and unquote(words[end]) not in (";", "+"):
            end += 1
        if end > index + 1:
            found.append(words[index + 1 : end])
        index = end + 1
    return found


def _plain(word: str) -> str:
    """``word`` without quotes it does not need (``"push"`` is ``push``), else as written."""
    value = unquote(word)
    return value if _PLAIN.fullmatch(value) else word


def _spellings(command: SimpleCommand) -> list[SimpleCommand]:
    """``command`` as written, without needless quotes, and with its program's base name;
    each with its assignments, then without them (``FOO=1 rm x`` is also ``rm x``)."""
    if not command.words:
        return [command]
    plain = tuple(_plain(word) for word in command.words)
    program = program_name(command.words[0])
    spellings = dict.fromkeys((command.words, plain, (program, *plain[1:])))
    found = [SimpleCommand(words, command.redirects, command.assignments) for words in spellings]
    if command.assignments:
        found += [SimpleCommand(words, command.redirects) for words in spellings]
    return found


def _runs(command: SimpleCommand) -> list[SimpleCommand | str]:
    """What ``command`` runs in turn: commands (keeping its redirections) or command lines."""
    program = command.program
    if program == "find":
        return [SimpleCommand(words, command.redirects) for words in _find_exec(command.words)]
    wrapper = WRAPPERS.get(program or "")
    if wrapper is None:
        return []
    inner = _wrapped(wrapper, command.words)
    if inner is None:
        return []
    if isinstance(inner, str):
        return [inner]
    # "coproc NAME { rm x; }": the words after a NAME may be the command as well.
    candidates = [inner, inner[1:]] if program == "coproc" else [inner]
    found: list[SimpleCommand | str] = []
    for candidate in candidates:
        assignments, words = _strip_prefix(candidate)  # "time FOO=1 git": FOO is git's
        if words:
            found.append(SimpleCommand(words, command.redirects, assignments))
    return found


def run_commands(text: str) -> tuple[SimpleCommand, ...]:
    """Every command ``text`` runs as far as a lexer can see, in order, without repeats.

    Each simple command comes as written, then without needless quotes, then
    with its program's base name (each with the assignments written before it,
    then without them), then whatever it runs through a wrapper
    (:data:`WRAPPERS`, ``find -exec``), each spelled the same ways:
    ``sudo env FOO=1 nice -n 5 /bin/rm -rf x`` ends with ``rm -rf x``. A
    wrapper's inner commands keep the wrapper's redirections; a command line
    handed to a shell (``sh -c 'rm x'``), ``eval``, ``watch`` or ``env -S`` is
    split in turn. Every step shortens the text, so this ends on any input.
    A line longer than :data:`MAX_TEXT`, running more than
    :data:`MAX_COMMANDS` different commands or :data:`MAX_RUN_TEXT`
    characters of their texts (redirections included: a wrapper's inner
    command repeats them), or nesting more than :data:`MAX_NESTING` levels raises
    :class:`CommandTooComplexError` rather than have part of it checked.
    """
    if len(text) > MAX_TEXT:
        raise CommandTooComplexError(f"it is longer than {MAX_TEXT} characters")
    found: dict[SimpleCommand, None] = {}
    seen: set[SimpleCommand] = set()
    pending: list[SimpleCommand | str] = [text]
    size = 0
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            pending.extend(reversed(split_commands(item)))
            continue
        if item in seen:
            continue
        seen.add(item)
        # Each wrapper layer repeats the words of the next and all the redirections: bound
        # the total, which is also what rules are matched against, not each.
        size += sum(map(len, (*item.assignments, *item.words)))
        size += sum(len(redirect.text) for redirect in item.redirects)
        if len(seen) > MAX_COMMANDS or size > MAX_RUN_TEXT:
            raise CommandTooComplexError(
                f"it runs more than {MAX_COMMANDS} different commands or {MAX_RUN_TEXT} "
                "characters of them, counting each command a wrapper runs"
            )
        for spelling in _spellings(item):
            found.setdefault(spelling)
        pending.extend(reversed(_runs(item)))
    return tuple(found)


def bash_commands(text: str, commands: Sequence[SimpleCommand] | None = None) -> tuple[str, ...]:
    """The subjects ``bash`` rules are matched against for ``text``, as opencode's patterns.

    One per command of :func:`run_commands`, its :attr:`SimpleCommand.text`:
    ``git status && rm -rf build`` gives ``git status`` and ``rm -rf build``,
    so ``"git *": "allow"`` cannot let the ``rm`` through; ``sudo /bin/rm x``
    gives ``sudo /bin/rm x``, ``/bin/rm x`` and ``rm x``; ``echo x > out``
    keeps its redirection. ``PATH=/tmp/x git status`` gives
    ``PATH=/tmp/x git status`` and ``git status``: a deny of ``git *`` holds,
    but ``git status *`` alone does not allow it, since what an assignment sets
    can make any program run other code (``GIT_CONFIG_*``, ``LD_PRELOAD``);
    an assignment alone (``PATH=/tmp/x``) is a subject too. ``cd`` commands are
    left out (only their directory is checked). A line that yields nothing
    else is matched as written.
    ``commands``, when given, is ``run_commands(text)`` already computed.
    """
    if commands is None:
        commands = run_commands(text)
    subjects = [command.text for command in commands if command.program != "cd"]
    if not subjects:
        return (text.strip(),)
    return tuple(dict.fromkeys(subjects))
