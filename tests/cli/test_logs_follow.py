"""`subvisor logs -f`: a subagent's transcript, then its answer as it streams, until it ends.

A real `subvisor run` (scripted root) delegates to a profile whose model is a
real local HTTP provider (``tests.support.provider_server``) that streams the
subagent's answer and holds it mid-answer until the test lets it go: what
`logs -f` prints meanwhile can only come from the coalesced ``text.streamed``
events (S-OBS-2), since the message is not stored yet.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from supervisor.state._paths import database_path
from supervisor.state._store import SessionStore
from tests.support.cli import run_cli, start_cli
from tests.support.delegation import home_for, readme_project, write_scenario
from tests.support.live_text import ANSWER, held_answer, streaming_setup
from tests.support.provider_server import ProviderServer

#: Long enough for a loaded machine; a hang fails the test instead of blocking it.
HANG = 60


def _subvisor(home: Path, project: Path, *args: str) -> subprocess.Popen[str]:
    return start_cli(
        home,
        *args,
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until(condition: Callable[[], object], what: str) -> None:
    """Wait until ``condition`` holds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + HANG
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


class _Reader:
    """What a child prints, collected by a thread as it comes (it may not end lines)."""

    def __init__(self, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(child.stdout,), daemon=True)
        self._thread.start()

    def until(self, text: str) -> None:
        """Wait until the child has printed ``text``."""
        _until(lambda: text in self.text, f"{text!r} printed")

    def _read(self, stream: IO[str]) -> None:
        while piece := stream.read(1):
            self.text += piece

    def join(self) -> str:
        self._thread.join(HANG)
        return self.text


def _ps(home: Path, project: Path) -> dict[str, object]:
    done = run_cli(home, "ps", "--json", cwd=project, timeout=HANG)
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def _streamer(home: Path, project: Path) -> tuple[str, str]:
    """The streamer's task id and what ``ps`` says it does now, once it is listed."""
    tasks = _ps(home, project)["tasks"]
    assert isinstance(tasks, list)
    for task in tasks:
        if task["description"] == "stream 0":
            activity = _ps(home, project)["activity"]
            assert isinstance(activity, dict)
            return str(task["task_id"]), str(activity.get(task["task_id"]) or "")
    return "", ""


def _stored_text(home: Path, task_id: str) -> str:
    with SessionStore(database_path(home)) as store:
        record = store.find_task(task_id)
        assert record is not None and record.child_session_id is not None
        return "\n".join(m.content for m in store.messages(record.child_session_id))


def _transcript(output: str) -> str:
    """The lines between the header rule and the output rule."""
    lines = output.splitlines()
    end = next(i for i, line in enumerate(lines) if "output" in line and "──" in line)
    return "\n".join(lines[1:end])


def test_logs_follow_shows_the_answer_as_it_streams_and_ends_with_the_task(
    tmp_path: Path,
) -> None:
    """S-OBS-2: `logs -f` on a running subagent prints the streamed start of its answer
    before the answer is stored, both for a follower that was there from the start and
    one that joined mid-answer; it exits 0 at the task's end with the whole transcript
    printed exactly once, as `logs` prints it."""
    resume = threading.Event()
    with ProviderServer() as server:
        server.enqueue(held_answer((2, resume)))
        home, project, model = streaming_setup(tmp_path, server)
        runner = _subvisor(home, project, "run", "--json", "--model", model, "go")
        followers: list[subprocess.Popen[str]] = []
        try:
            _until(lambda: (home / "run").is_dir() and any((home / "run").glob("*.addr")), "live")
            _until(lambda: _streamer(home, project)[0], "the streamer's task")
            task_id, _ = _streamer(home, project)
            early = _subvisor(home, project, "logs", "-f", task_id[:16])
            followers.append(early)
            early_out = _Reader(early)
            # The model holds the answer after its first pieces: it is streaming, unstored.
            _until(lambda: "streaming" in _streamer(home, project)[1], "streaming")
            late = _subvisor(home, project, "logs", "-f", task_id)
            followers.append(late)
            late_out = _Reader(late)
            for reader in (early_out, late_out):
                reader.until(ANSWER[0])
            assert ANSWER[0] not in _stored_text(home, task_id)
            resume.set()
            for follower in followers:
                assert follower.wait(HANG) == 0, follower.communicate()[1]
            runner_out, runner_err = runner.communicate(timeout=HANG)
        finally:
            resume.set()
            for process in (runner, *followers):
                process.kill()
    assert runner.returncode == 0, runner_err
    assert json.loads(runner_out)["answer"].startswith("relayed: " + "".join(ANSWER))
    logs = run_cli(home, "logs", task_id, cwd=project)
    assert logs.returncode == 0, logs.stderr
    whole = "".join(ANSWER)
    assert _transcript(logs.stdout).count(whole) == 1
    for reader in (early_out, late_out):
        followed = reader.join()
        assert followed.count(whole) == 2, followed  # the transcript, then the output file
        assert _transcript(followed) == _transcript(logs.stdout)
        assert followed.rstrip().endswith(f"task {task_id} ended: completed")


def test_logs_follow_on_a_finished_task_prints_it_and_exits(tmp_path: Path) -> None:
    """A task that has ended: `logs -f` prints what `logs` prints and exits 0 at once."""
    with ProviderServer() as server:
        resume = threading.Event()
        resume.set()
        server.enqueue(held_answer((2, resume)))
        home, project, model = streaming_setup(tmp_path, server)
        done = run_cli(home, "run", "--json", "--model", model, "go", cwd=project, timeout=HANG)
    assert done.returncode == 0, done.stderr
    task_id = json.loads(done.stdout)["tasks"][0]["agentId"]
    followed = run_cli(home, "logs", "-f", task_id, cwd=project, timeout=HANG)
    logs = run_cli(home, "logs", task_id, cwd=project, timeout=HANG)
    assert followed.returncode == logs.returncode == 0, followed.stderr
    assert followed.stdout == logs.stdout
    assert "".join(ANSWER) in followed.stdout


def test_logs_follow_of_an_unknown_task_is_one_line(tmp_path: Path) -> None:
    home, project = home_for(tmp_path), readme_project(tmp_path)
    scenario = write_scenario(tmp_path / "plain.yaml", {"root": [{"text": "hi"}]})
    assert run_cli(home, "run", "--model", scenario, "go", cwd=project).returncode == 0
    done = run_cli(home, "logs", "-f", "agent_nope", cwd=project, timeout=HANG)
    assert done.returncode == 1
    output = (done.stdout + done.stderr).strip()
    assert len(output.splitlines()) == 1 and "agent_nope" in output, output
