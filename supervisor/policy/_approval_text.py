"""How an approval is shown to a person: one rendering for every place that asks (S-APR-1).

The terminal prompt, the live view and ``subvisor mcp``'s elicitation all
show :func:`approval_view`, so what a person reads does not depend on where
they approve.

Invariants:

- What runs comes first and whole: a local tool's subject (Bash's
  ``command``; Read/Write/Edit's ``file_path``; LS's ``path``; Glob and
  Grep's ``pattern`` then the ``path`` they search). Those keys mean that only
  for those tools: any other tool (an MCP tool) is shown as its whole input,
  JSON with sorted keys, never by a key it happens to carry.
- The model's ``description`` of a local tool call is labelled as the agent's
  own words and comes after everything that runs; the rest of the input
  (``content``, ``timeout``...) comes between, as JSON.
- Bounded, and never silently: a run of whitespace longer than
  :data:`WHITESPACE_RUN` is shown as its length (display only); text still
  past its limit shows its head and its tail with how many characters are
  not shown between them. A request whose subject was cut is never offered
  "always" (``offers_always`` is False): nobody can remember a rule for what
  they did not see.
- Every character an agent chose is escaped (``printable``), and the subject
  stays on its one line (a newline in it is shown as ``\\n``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from worker.tools import resolve_tool_name

from ..files._printable import printable

__all__ = ["SHOWN_INPUT_CHARS", "ApprovalView", "approval_view", "bounded"]

#: The most of a subject (a command, a path, an MCP call's input) an approval shows.
SHOWN_INPUT_CHARS: Final = 4000
#: The most of the rest of the input, and of the agent's description.
_SHOWN_REST_CHARS: Final = 1000
_SHOWN_DESCRIPTION_CHARS: Final = 500
#: A run of whitespace longer than this is shown as its length.
WHITESPACE_RUN: Final = 8
_RUN: Final = re.compile(rf"\s{{{WHITESPACE_RUN + 1},}}")

#: The keys naming what a local tool acts on, in the order shown.
_SUBJECT_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "Bash": ("command",),
    "Read": ("file_path",),
    "Write": ("file_path",),
    "Edit": ("file_path",),
    "LS": ("path",),
    "Glob": ("pattern", "path"),
    "Grep": ("pattern", "path"),
}


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """An approval as a person sees it: the question's text, and whether "always" is offered."""

    text: str
    offers_always: bool


def bounded(text: str, limit: int) -> tuple[str, bool]:
    """``text`` for display within about ``limit`` characters, escaped; and whether it was cut.

    Long whitespace runs become ``[N whitespace characters]``; past ``limit``
    the head and the tail are kept around ``[... N characters not shown ...]``.
    """
    collapsed = _RUN.sub(lambda run: f" [{len(run.group())} whitespace characters] ", text)
    shown = printable(collapsed)
    if len(shown) <= limit:
        return shown, False
    keep = limit // 2
    hidden = len(shown) - 2 * keep
    return f"{shown[:keep]} [... {hidden} characters not shown ...] {shown[-keep:]}", True


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def approval_view(
    origin_text: str, tool: str, tool_input: Mapping[str, Any], reason: str
) -> ApprovalView:
    """The question for one ask: who (``origin_text``), which tool, what runs, the rest, why."""
    local = resolve_tool_name(tool)
    keys = _SUBJECT_KEYS.get(local or "", ())
    lines = []
    if keys:
        parts = []
        cut = False
        for key in keys:
            value = tool_input.get(key)
            if value is None and key != keys[0]:
                continue
            text = value if isinstance(value, str) else _json(value)
            shown, was_cut = bounded(text, SHOWN_INPUT_CHARS)
            parts.append(shown if key == keys[0] else f"{key}={shown}")
            cut = cut or was_cut
        subject = "  ".join(parts)
        rest = {k: v for k, v in tool_input.items() if k not in keys and k != "description"}
        if rest:
            lines.append(f"  other input: {bounded(_json(rest), _SHOWN_REST_CHARS)[0]}")
        description = tool_input.get("description")
        if description is not None:
            words = description if isinstance(description, str) else _json(description)
            shown = bounded(words, _SHOWN_DESCRIPTION_CHARS)[0]
            lines.append(f"  the agent's own description (not what runs): {shown}")
    else:
        subject, cut = bounded(_json(dict(tool_input)), SHOWN_INPUT_CHARS)
    if cut:
        lines.append("  (not shown whole: 'always' is not offered)")
    head = f"{origin_text} wants to run {printable(tool)}: {subject}"
    text = "\n".join([head, *lines, f"  ({printable(reason)})"])
    return ApprovalView(text, offers_always=not cut)
