"""What one permission check may cost: bounded by its input, whatever the input (S-SEC-9, S-POL-2).

A worker asks the supervisor to check tool calls (``permission.check``); a line built to be
expensive to check must not stall the supervisor. The work is counted here, not timed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any
from unittest import mock

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from supervisor.policy import _tool_permissions
from supervisor.policy._approval_desk import INLINE_COMMAND, ApprovalDesk
from supervisor.policy._approvals import ApprovalOrigin, Requester
from supervisor.policy._bash_lexer import MAX_REDIRECTS, MAX_TEXT
from supervisor.policy._policy import PolicyDecision, ToolPolicy
from supervisor.policy._rule_config import rules_from_config
from supervisor.policy._rules import wildcard_match
from supervisor.policy._tool_permissions import MAX_PATHS, permission_checks

PROJECT = "/tmp/proj"


def _allow_all() -> ToolPolicy:
    return ToolPolicy(rules=rules_from_config({"*": "allow"}), mode="default", project_dir=PROJECT)


_PATHS = st.sampled_from(["a", "b/c", "../up", "/etc/x", "~/k", '"q r"', "$HOME/h", "/dev/null"])
_PIECES = st.one_of(
    st.builds(
        lambda op, p: f"{op}{p}", st.sampled_from([">", ">>", "<", "2>", "&>", "<>"]), _PATHS
    ),
    st.builds(
        lambda cmd, p: f"{cmd} {p}", st.sampled_from(["rm", "cd", "cat", "tee", "mkdir"]), _PATHS
    ),
    st.sampled_from(["sudo", "env", "nice", "echo", "x", ";", "|", "&&", "\n"]),
)


@given(st.lists(_PIECES, max_size=60))
def test_paths_are_worked_out_once_each(pieces: list[str]) -> None:
    """Each different path of a line is resolved a bounded number of times (at most twice for
    each of four uses: read, written, a file or a directory argument), however often the line,
    its wrappers or its spellings repeat it: ``">a " * 340000`` resolved ``a`` 680,000 times."""
    line = " ".join(pieces)
    resolve = _tool_permissions._resolve
    with mock.patch.object(_tool_permissions, "_resolve", side_effect=resolve) as counted:
        permission_checks("Bash", {"command": line}, PROJECT)
    distinct = {piece.split()[-1].lstrip("<>&2") for piece in pieces if piece[:1] in "<>&2"}
    distinct |= {piece.split()[-1] for piece in pieces if " " in piece}
    assert counted.call_count <= 2 * 4 * len(distinct)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(">a " * 340000, id="the red team's 1 MB line of redirections"),
        pytest.param("x" * (MAX_TEXT + 1), id="one word past the limit"),
        pytest.param("".join(f">f{n} " for n in range(MAX_PATHS + 1)), id="too many paths"),
        pytest.param("x" + " >a" * (MAX_REDIRECTS + 1), id="too many redirections"),
        pytest.param("rm " + " ".join(f"f{n}" for n in range(MAX_PATHS + 1)), id="too many rm"),
        pytest.param("sudo " * 300 + "x " + ">a " * 30000, id="wrappers repeating redirects"),
    ],
)
def test_a_line_too_costly_to_check_is_denied_as_too_complex(line: str) -> None:
    """S-SEC-9: past the limits the answer is the strictest (deny), even where every rule
    allows, with a one-line reason; never a check of part of the line."""
    decision = _allow_all().check("Bash", {"command": line})
    assert decision.action == "deny"
    assert "too complex to check" in decision.reason
    assert "\n" not in decision.reason


def test_a_line_within_the_limits_is_still_checked_in_full() -> None:
    """S-SEC-9: a long line under the limits gets its rules, the deny of its last command too."""
    policy = ToolPolicy(
        rules=rules_from_config({"*": "allow", "bash": {"*": "allow", "rm *": "deny"}}),
        mode="default",
        project_dir=PROJECT,
    )
    line = ">a " * 4000 + "; " + "echo x " * 10000 + "; rm -rf b"
    assert len(line) < MAX_TEXT
    assert policy.check("Bash", {"command": line}).action == "deny"
    assert policy.check("Bash", {"command": line[: -len("; rm -rf b")]}).action == "allow"


def test_wildcards_with_several_stars_match_long_subjects() -> None:
    """S-POL-2: matching does not backtrack: ``*a*b*c*`` against a 200 KB subject without
    ``c`` took cubic time as a regex (a 20 KB one took a minute)."""
    subject = "ab" * 100000
    assert not wildcard_match("*a*b*c*", subject)
    assert wildcard_match("*a*b*b*", subject)
    assert not wildcard_match("*a?b*c", subject)
    assert wildcard_match("a*b?b*b *", subject)
    assert not wildcard_match("a*b?a*b *", subject)


class _Recording:
    """A policy holder whose check notes the thread it ran on."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.policy = self

    def check(self, tool_name: str, tool_input: Mapping[str, Any]) -> PolicyDecision:
        self.threads.append(threading.current_thread())
        return PolicyDecision("allow")


async def test_a_long_command_is_checked_off_the_event_loop() -> None:
    """S-SEC-9: a long Bash command's check runs on a thread, so every other agent, heartbeat
    and watchdog keeps running; a short one is checked in place."""
    desk = ApprovalDesk(store=mock.Mock(), approval_handler=None)
    requester = Requester("s", ApprovalOrigin("subagent", "a"), "d", ())
    holder = _Recording()
    for command in ("ls", "x" * (INLINE_COMMAND + 1)):
        decision = await desk.authorize(holder, "Bash", {"command": command}, requester)  # type: ignore[arg-type]
        assert decision.action == "allow"
    assert holder.threads[0] is threading.current_thread()
    assert holder.threads[1] is not threading.current_thread()
    await trio.lowlevel.checkpoint()


class _Gated:
    """A policy holder whose checks note who asked, then wait for the test's gate."""

    def __init__(self, name: str, order: list[str], gate: threading.Event) -> None:
        self.name, self.order, self.gate = name, order, gate
        self.policy = self
        self.started = threading.Event()

    def check(self, tool_name: str, tool_input: Mapping[str, Any]) -> PolicyDecision:
        self.order.append(self.name)
        self.started.set()
        self.gate.wait()
        return PolicyDecision("allow")


async def test_s_sec_8_a_siblings_long_check_waits_behind_one_of_a_hogs_not_all() -> None:
    """S-SEC-8: a worker keeping 31 long checks in flight does not queue a sibling's long
    check behind all of them (red team: a 6 KB heredoc waited 7.5 s behind 31 checks of a
    130 KB line). Each requester has one long check at a time at the desk's one thread
    slot, so the sibling's runs right after the hog's one that was running when it asked;
    still one long check runs at a time. Counted, not timed."""
    desk = ApprovalDesk(store=mock.Mock(), approval_handler=None)
    order: list[str] = []
    gate = threading.Event()
    hog, sibling = _Gated("hog", order, gate), _Gated("sibling", order, gate)
    long = {"command": "a;" * INLINE_COMMAND}
    asked = {
        name: Requester("s", ApprovalOrigin("subagent", name), "d", ())
        for name in ("hog", "sibling")
    }
    async with trio.open_nursery() as nursery:
        # The gate opens whatever happens: a check waiting on it holds its thread,
        # which no cancellation reaches, and the nursery would wait for it forever.
        try:
            for _ in range(31):
                nursery.start_soon(desk.authorize, hog, "Bash", long, asked["hog"])
            # A task waiting for its thread counts as blocked before the thread ran.
            await trio.to_thread.run_sync(hog.started.wait)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(desk.authorize, sibling, "Bash", long, asked["sibling"])
            await trio.testing.wait_all_tasks_blocked()
            running = list(order)
        finally:
            gate.set()
    assert running == ["hog"]  # one long check at a time: the others wait
    assert order.index("sibling") == 1
    assert order.count("hog") == 31
    assert desk._turns == {}  # nobody left waiting: nothing kept per requester
