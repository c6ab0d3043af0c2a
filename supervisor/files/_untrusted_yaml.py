"""YAML that a user, a project or a repository supplies: no aliases, nothing but text.

An alias (``*name``) repeats the node its anchor (``&name``) names. A few
hundred bytes of nested aliases (a "billion laughs") stand for billions of
values: PyYAML builds them cheaply as shared objects, but whatever walks the
result afterwards (validation, the ``repr`` in an error message, JSON
encoding) pays for every repetition; one agent profile cost 45 s and 3 GB.

A double-quoted ``"\\udcff"`` is a lone surrogate: a Python ``str`` that no
UTF-8 encoder (JSON, msgpack, SQLite) accepts, so it fails wherever it is
stored or sent, far from the file that held it.

Collections nested thousands deep (a file of ``[``) cost PyYAML's pure
Python scanner time per level that grows with the depth: 40 KB of ``[`` in a
profile's frontmatter took 46 s to scan, on every ``run`` and ``agents``.
libyaml stops at 1000 levels, the Python loader never does.

Invariant: no document with an alias, a lone surrogate or collections nested
deeper than ``MAX_DEPTH`` reaches a constructor. The check is one pass over
the parser's events, before anything is built, and it stops at the first
collection past ``MAX_DEPTH``: the scanner never holds more than
``MAX_DEPTH`` open levels, so the work is linear in the text. An anchor
without an alias repeats nothing and passes.
"""

from __future__ import annotations

from typing import Any

import yaml

from .._errors import SubvisorError

__all__ = [
    "FAST_LOADER",
    "MAX_DEPTH",
    "RefusedYamlError",
    "check_untrusted_yaml",
    "describe_yaml_error",
    "dump_yaml",
    "load_untrusted_yaml",
]

#: libyaml's safe loader where PyYAML was built with it: the same documents as
#: ``yaml.SafeLoader``, parsed several times faster.
FAST_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The deepest nesting of collections accepted: far past any profile, config or scenario.
MAX_DEPTH = 100


class RefusedYamlError(SubvisorError, yaml.MarkedYAMLError):
    """The document uses an alias or a lone surrogate; ``problem_mark`` is where."""


def check_untrusted_yaml(text: str, loader: type[yaml.SafeLoader] = FAST_LOADER) -> None:
    """Raise ``RefusedYamlError`` at the first alias, lone surrogate or collection nested
    deeper than ``MAX_DEPTH`` of ``text``.

    ``yaml.YAMLError`` if ``text`` does not parse.
    """
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        # libyaml's marks are its own class, with the same fields.
        where: Any = event.start_mark
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise RefusedYamlError(
                    problem=(
                        f"collections are nested more than {MAX_DEPTH} levels deep here; "
                        "no setting needs that many"
                    ),
                    problem_mark=where,
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if isinstance(event, yaml.AliasEvent):
            raise RefusedYamlError(
                problem=(
                    f"YAML aliases are not accepted (found *{event.anchor}): an alias repeats "
                    "another part of the document, and a few nested ones stand for billions "
                    "of values; write the value out instead"
                ),
                problem_mark=where,
            )
        if isinstance(event, yaml.ScalarEvent) and not _is_text(event.value):
            raise RefusedYamlError(
                problem=(
                    "a \\u escape here is half of a UTF-16 surrogate pair, not a character; "
                    "write the character itself"
                ),
                problem_mark=where,
            )


def load_untrusted_yaml(text: str, loader: type[yaml.SafeLoader] = FAST_LOADER) -> Any:
    """The single document of ``text``; ``yaml.YAMLError`` if it does not parse or is refused."""
    check_untrusted_yaml(text, loader)
    return yaml.load(text, Loader=loader)


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any, *, sort_keys: bool = True) -> str:
    """``data`` as YAML that ``load_untrusted_yaml`` accepts: a shared value is written again."""
    text: str = yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=sort_keys)
    return text


def _is_text(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """``exc`` on one line: its problem, then where (``line L, column C``, 1-based) if known."""
    if isinstance(exc, yaml.reader.ReaderError) and isinstance(exc.character, int):
        return (
            f"character U+{exc.character:04X} is not allowed in YAML ({exc.reason}): is this a "
            "text file?"
        )
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    parts = []
    for text, mark in ((exc.context, exc.context_mark), (exc.problem, exc.problem_mark)):
        if text:
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            parts.append(" ".join(text.split()) + where)
    return "; ".join(parts) or "invalid YAML"
