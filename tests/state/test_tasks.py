"""The task registry (S-RUN-1, S-RUN-6, S-NOTE-3), with real output dirs and a real SQLite file."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from pydantic import ValidationError

from supervisor.files import _atomic_write
from supervisor.state._paths import (
    HOMES_FILE,
    agent_output_dir,
    database_path,
    known_homes,
    register_home,
    subvisor_home,
)
from supervisor.state._store import SessionStore
from supervisor.state._task_record import TaskRecord, TaskUsage, new_task_id
from supervisor.state._tasks import (
    DuplicateTaskError,
    TaskError,
    TaskNotRunningError,
    TaskRegistry,
    UnknownTaskError,
)
from tests.support.filesystem import can_mark_top_directories, is_top_directory


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def store(home: Path) -> Iterator[SessionStore]:
    with SessionStore(home / "subvisor.db") as opened:
        yield opened


@pytest.fixture
def registry(store: SessionStore, home: Path) -> TaskRegistry:
    return TaskRegistry(store, home)


def agent(task_id: str = "agent_1", parent: str = "sess_root", **fields: object) -> TaskRecord:
    return TaskRecord.model_validate(
        {
            "task_id": task_id,
            "kind": "local_agent",
            "parent_session_id": parent,
            "description": "find the bug",
            "subagent_type": "Explore",
            "prompt": "Find where the parser drops bytes.",
            "background": True,
            "tool_use_id": "toolu_1",
            **fields,
        }
    )


def read_metadata(record: TaskRecord) -> TaskRecord:
    return TaskRecord.model_validate(
        json.loads((Path(record.output_dir) / "metadata.json").read_text())
    )


def test_a_record_stored_with_a_branch_generation_still_loads() -> None:
    """Records written when tasks carried a ``generation`` (retired: no session is ever
    rewound, S-NOTE-3) still load; a field nobody knows is still refused."""
    record = agent()
    stored = record.model_dump(mode="json")
    assert TaskRecord.model_validate({**stored, "generation": 2}) == record
    with pytest.raises(ValidationError):
        TaskRecord.model_validate({**stored, "branch": 2})


def test_register_creates_output_dir_and_files_s_run_1(
    registry: TaskRegistry, store: SessionStore, home: Path
) -> None:
    record = registry.register(agent())
    output_dir = home / "agents" / "sess_root" / "agent_1"
    assert record.output_dir == str(output_dir)
    assert record.output_file == str(output_dir / "output.txt")
    assert record.log_file == str(output_dir / "task.output")
    assert (output_dir / "output.txt").read_text() == ""
    assert (output_dir / "task.output").read_text() == ""
    assert read_metadata(record) == record
    assert store.get_task("agent_1") == record
    assert registry.get("agent_1") == record


def test_register_refuses_duplicates_terminal_records_and_path_tricks(
    registry: TaskRegistry, store: SessionStore, home: Path
) -> None:
    registry.register(agent())
    with pytest.raises(DuplicateTaskError, match="agent_1"):
        registry.register(agent())
    # Registered by an earlier run: only in the store.
    store.save_task(agent("agent_old"))
    with pytest.raises(DuplicateTaskError, match="agent_old"):
        TaskRegistry(store, home).register(agent("agent_old"))
    with pytest.raises(TaskError, match="register it pending or running"):
        registry.register(agent("agent_2", status="completed"))
    with pytest.raises(ValueError, match="cannot name a directory"):
        registry.register(agent("../../escape"))


def test_update_validates_and_persists(registry: TaskRegistry, store: SessionStore) -> None:
    registry.register(agent())
    updated = registry.update("agent_1", status="running", child_session_id="sess_child")
    assert updated.status == "running"
    assert read_metadata(updated) == updated
    assert store.get_task("agent_1") == updated
    with pytest.raises(ValidationError):
        registry.update("agent_1", status="sleeping")
    with pytest.raises(ValidationError):
        registry.update("agent_1", colour="blue")
    with pytest.raises(TaskError, match="call finish"):
        registry.update("agent_1", status="completed")
    with pytest.raises(TaskError, match="cannot be renamed"):
        registry.update("agent_1", task_id="agent_2")
    with pytest.raises(UnknownTaskError, match="agent_9"):
        registry.update("agent_9", status="running")
    assert registry.get("agent_1") == updated


@pytest.mark.machine_may_lack("renameat2 in its libc", when=_atomic_write._renameat2 is None)
def test_metadata_rewrites_swap_two_inodes_and_free_none_s_run_1(
    registry: TaskRegistry,
) -> None:
    """S-RUN-1: a rewrite of metadata.json is atomic (a reader that opened the old file
    reads the old version whole) and, from the second write on, neither creates nor
    frees an inode: the old one becomes the scratch file of the next rewrite."""
    record = registry.register(agent(status="running"))
    path = Path(record.output_dir) / "metadata.json"
    scratch = path.with_name(".metadata.json.partial")
    inodes = {path.stat().st_ino}
    for turn in range(4):
        with path.open() as before:
            registry.update("agent_1", child_session_id=f"sess_{turn}")
            old = json.loads(before.read())["child_session_id"]
        assert old == (f"sess_{turn - 1}" if turn else None)
        assert read_metadata(registry.get("agent_1")).child_session_id == f"sess_{turn}"
        inodes |= {path.stat().st_ino, scratch.stat().st_ino}
    assert len(inodes) == 2


def test_a_shorter_rewrite_of_a_reused_scratch_file_leaves_no_stale_tail(
    tmp_path: Path,
) -> None:
    """The scratch inode is written over, then cut to the new length: each version
    reads back exactly, however long the one before it in that inode was."""
    path = tmp_path / "metadata.json"
    versions = ["a" * 5000, "b" * 3000, "c" * 10, "d" * 4, "", "e" * 7]
    for text in versions:
        _atomic_write.write_atomically(path, text)
        assert path.read_text() == text
    mode_path = tmp_path / "secret.json"
    for text in ("x" * 100, "y"):
        _atomic_write.write_atomically(mode_path, text, mode=0o600)
        assert mode_path.read_text() == text
        assert mode_path.stat().st_mode & 0o777 == 0o600


@pytest.mark.machine_may_lack("a filesystem with ext4's top-directory flag under its tmp dir")
def test_the_agents_dir_is_marked_as_a_top_directory_where_the_filesystem_can(
    registry: TaskRegistry, home: Path, tmp_path: Path
) -> None:
    """S-RUN-1: ``agents/`` carries ext4's top-directory flag (each session's dir, with
    its tasks' files, then starts in a fresh block group), where the filesystem has it."""
    if not can_mark_top_directories(tmp_path):
        pytest.skip("this filesystem has no top-directory flag")
    registry.register(agent())
    assert is_top_directory(home / "agents")
    assert not is_top_directory(home / "agents" / "sess_root")


def test_output_log_while_running_then_result_after_finish_s_run_6(
    registry: TaskRegistry,
) -> None:
    registry.register(agent(status="running"))
    registry.append_output("agent_1", "Read(main.py)\n")
    registry.append_output("agent_1", "Grep(TODO)\n")
    assert registry.read_output("agent_1") == "Read(main.py)\nGrep(TODO)\n"
    usage = TaskUsage(input_tokens=10, output_tokens=5, tool_calls=2, duration_ms=1234)
    finished = registry.finish("agent_1", "completed", result="found it", usage=usage)
    assert finished.status == "completed"
    assert finished.result == "found it"
    assert finished.usage == usage
    assert finished.ended_at is not None
    assert Path(finished.output_file).read_text() == "found it"
    assert registry.read_output("agent_1") == "found it"
    assert Path(finished.log_file).read_text() == "Read(main.py)\nGrep(TODO)\n"
    assert read_metadata(finished) == finished


def test_a_task_ends_once(registry: TaskRegistry, store: SessionStore) -> None:
    registry.register(agent(status="running"))
    first = registry.finish("agent_1", "failed", error="worker crashed", worker_exit="SIGSEGV")
    again = registry.finish("agent_1", "completed", result="late answer")
    assert again == first
    assert first.status == "failed"
    assert Path(first.output_file).read_text() == "worker crashed"
    assert store.get_task("agent_1") == first
    with pytest.raises(TaskNotRunningError, match="already failed"):
        registry.update("agent_1", status="running")
    with pytest.raises(TaskError, match="terminal status"):
        registry.finish("agent_1", "running")


def test_finish_without_reported_duration_uses_wall_time(registry: TaskRegistry) -> None:
    record = registry.register(agent(status="running", created_at=1.0))
    finished = registry.finish(record.task_id, "completed", result="ok")
    assert finished.ended_at is not None
    assert finished.usage.duration_ms == round((finished.ended_at - 1.0) * 1000)


def test_list_and_running_in_creation_order(registry: TaskRegistry) -> None:
    registry.register(agent("agent_b"))
    registry.register(agent("agent_a", parent="sess_other", status="running"))
    registry.register(agent("agent_c", status="running"))
    registry.finish("agent_c", "completed", result="")
    assert [task.task_id for task in registry.list()] == ["agent_b", "agent_a", "agent_c"]
    assert [task.task_id for task in registry.list("sess_root")] == ["agent_b", "agent_c"]
    assert [task.task_id for task in registry.running()] == ["agent_b", "agent_a"]


async def test_wait_returns_when_finished(registry: TaskRegistry) -> None:
    registry.register(agent(status="running"))
    finished: list[TaskRecord] = []

    async def waiter() -> None:
        finished.append(await registry.wait("agent_1"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert finished == []
        registry.finish("agent_1", "completed", result="done")
    assert [record.status for record in finished] == ["completed"]
    assert (await registry.wait("agent_1")).result == "done"


def test_mark_notified_is_true_once_across_registries_s_note_3(
    registry: TaskRegistry, home: Path
) -> None:
    registry.register(agent(status="running"))
    registry.finish("agent_1", "completed", result="done")
    # A second process (or a restarted supervisor) on the same database.
    with SessionStore(home / "subvisor.db") as other_store:
        other = TaskRegistry(other_store, home)
        assert other.mark_notified("agent_1") is True
        assert registry.mark_notified("agent_1") is False
        assert other.mark_notified("agent_1") is False
    record = registry.get("agent_1")
    assert record is not None
    assert read_metadata(record).notified is True
    with pytest.raises(UnknownTaskError):
        registry.mark_notified("agent_none")


def test_mark_notified_in_memory_task_persists(registry: TaskRegistry, home: Path) -> None:
    registry.register(agent(status="running"))
    assert registry.mark_notified("agent_1") is True
    record = registry.get("agent_1")
    assert record is not None
    assert record.notified is True
    # A later save of this task keeps the flag.
    registry.update("agent_1", description="renamed")
    with SessionStore(home / "subvisor.db") as other_store:
        stored = other_store.get_task("agent_1")
        assert stored is not None
        assert stored.notified is True
        assert TaskRegistry(other_store, home).mark_notified("agent_1") is False


def test_another_process_reads_a_finished_tasks_output(registry: TaskRegistry, home: Path) -> None:
    """``subvisor logs ID`` in a second process: record and output from store and files."""
    registry.register(agent(status="running"))
    registry.finish("agent_1", "completed", result="the answer")
    with SessionStore(home / "subvisor.db") as other_store:
        other = TaskRegistry(other_store, home)
        assert other.list() == []
        record = other.get("agent_1")
        assert record is not None
        assert record.status == "completed"
        assert other.read_output("agent_1") == "the answer"
    with pytest.raises(UnknownTaskError):
        registry.read_output("agent_none")


async def test_stop_calls_the_stopper_and_its_finish_wins_s_run_6(
    registry: TaskRegistry,
) -> None:
    registry.register(agent(status="running"))
    stopped: list[str] = []

    async def stopper(reason: str) -> None:
        stopped.append(reason)
        await trio.lowlevel.checkpoint()
        registry.finish("agent_1", "killed", error="cancelled", usage=TaskUsage(tool_calls=3))

    registry.set_stopper("agent_1", stopper)
    record = await registry.stop("agent_1")
    assert stopped == ["stopped by request"]
    assert record.status == "killed"
    assert record.error == "cancelled"
    assert record.usage.tool_calls == 3
    with pytest.raises(TaskNotRunningError, match="already killed; there is nothing to stop"):
        await registry.stop("agent_1")


async def test_stop_kills_a_task_its_stopper_left_unfinished(registry: TaskRegistry) -> None:
    registry.register(agent(status="running"))
    calls: list[int] = []

    async def stopper(reason: str) -> None:
        calls.append(1)
        await trio.testing.wait_all_tasks_blocked()

    registry.set_stopper("agent_1", stopper)
    async with trio.open_nursery() as nursery:
        # Two concurrent stops call the stopper once; both see the final record.
        nursery.start_soon(registry.stop, "agent_1")
        nursery.start_soon(registry.stop, "agent_1")
    assert calls == [1]
    record = registry.get("agent_1")
    assert record is not None
    assert record.status == "killed"
    assert record.error == "stopped by request"
    assert registry.read_output("agent_1") == "stopped by request"


async def test_stop_errors_say_why(registry: TaskRegistry, store: SessionStore) -> None:
    with pytest.raises(UnknownTaskError, match="no task 'agent_9'"):
        await registry.stop("agent_9")
    registry.register(agent("agent_pending"))
    stopped = await registry.stop("agent_pending")
    assert stopped.status == "killed"
    registry.register(agent("agent_starting", status="running"))
    with pytest.raises(TaskNotRunningError, match="still starting"):
        await registry.stop("agent_starting")
    store.save_task(agent("agent_elsewhere", status="running"))
    with pytest.raises(TaskNotRunningError, match="another subvisor process"):
        await registry.stop("agent_elsewhere")
    store.save_task(agent("agent_done_elsewhere", status="completed"))
    with pytest.raises(TaskNotRunningError, match="already completed"):
        await registry.stop("agent_done_elsewhere")


async def test_background_bash_shares_the_stop_and_output_interface_s_run_6(
    registry: TaskRegistry,
) -> None:
    """A real background process registered as ``local_bash``: listed, logged, stopped."""
    task_id = new_task_id("local_bash")
    registry.register(
        TaskRecord(
            task_id=task_id,
            kind="local_bash",
            parent_session_id="sess_root",
            description="sleep forever",
            background=True,
            status="running",
        )
    )
    process = await trio.lowlevel.open_process(["sleep", "60"])

    async def run() -> None:
        code = await process.wait()
        registry.append_output(task_id, f"exit {code}\n")
        registry.finish(task_id, "killed", error=f"killed by signal {-code}")

    async def stopper(reason: str) -> None:
        process.kill()
        await registry.wait(task_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        registry.set_stopper(task_id, stopper)
        assert [task.task_id for task in registry.running()] == [task_id]
        record = await registry.stop(task_id)
    assert record.kind == "local_bash"
    assert record.status == "killed"
    assert record.error == f"killed by signal {int(signal.SIGKILL)}"
    assert await trio.Path(record.log_file).read_text() == f"exit {-int(signal.SIGKILL)}\n"
    assert registry.running() == []


def test_new_task_ids_are_unique_and_prefixed() -> None:
    ids = {new_task_id("local_agent") for _ in range(100)}
    assert len(ids) == 100
    assert all(task_id.startswith("agent_") for task_id in ids)
    assert new_task_id("local_bash").startswith("bash_")


def test_total_tokens_counts_cache_tokens() -> None:
    usage = TaskUsage(input_tokens=1, output_tokens=2, cache_read_tokens=4, cache_write_tokens=8)
    assert usage.total_tokens == 15


def test_home_comes_from_subvisor_home_else_the_user_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SUBVISOR_HOME", str(tmp_path / "custom"))
    assert subvisor_home() == tmp_path / "custom"
    monkeypatch.setenv("SUBVISOR_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert subvisor_home() == tmp_path / "user" / ".subvisor"
    assert database_path(tmp_path) == tmp_path / "subvisor.db"


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "..\\x", "nul\0"])
def test_output_dir_ids_must_be_plain_names_s_run_1(tmp_path: Path, bad: str) -> None:
    assert agent_output_dir(tmp_path, "sess_1", "agent_1") == tmp_path / "agents/sess_1/agent_1"
    with pytest.raises(ValueError, match="cannot name a directory"):
        agent_output_dir(tmp_path, bad, "agent_1")
    with pytest.raises(ValueError, match="cannot name a directory"):
        agent_output_dir(tmp_path, "sess_1", bad)


def test_s_sec_1_each_home_is_listed_once_in_the_default_home_and_gone_ones_are_dropped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """S-SEC-1: every run lists its home (resolved) in ``~/.subvisor/homes``, made 0700 if
    missing; a listed home that no longer exists is dropped, as is any line that is not an
    absolute path; each home listed and still there is one ``known_homes`` names."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("SUBVISOR_HOME", "")
    first, second, gone = tmp_path / "a", tmp_path / "b", tmp_path / "gone"
    for home in (first, second, gone):
        home.mkdir()
    register_home(first)
    default = tmp_path / "user" / ".subvisor"
    assert default.stat().st_mode & 0o777 == 0o700
    listing = default / HOMES_FILE
    listing.write_bytes(
        listing.read_bytes()
        + b"relative/path\n\xff\xfe junk\n/nul\x00in/it\n"
        + f"{gone}\n".encode()
    )
    gone.rmdir()
    assert set(known_homes(tmp_path / "mine")) == {tmp_path / "mine", default, first}
    link = tmp_path / "link-to-b"
    link.symlink_to(second)
    register_home(link)
    register_home(first)
    assert listing.read_text().splitlines() == [str(first), str(second)]
    assert set(known_homes(tmp_path / "mine")) >= {first, second, default}


def test_s_sec_1_a_listed_home_that_holds_the_project_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """S-SEC-1: a listed home that holds the working directory (or the user's home dir) is
    not one to hide: a tmpfs over it would hide the project from every subagent."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("SUBVISOR_HOME", "")
    around, aside = tmp_path / "around", tmp_path / "aside"
    (around / "project").mkdir(parents=True)
    aside.mkdir()
    register_home(around)
    register_home(aside)
    monkeypatch.chdir(around / "project")
    homes = known_homes(tmp_path / "mine")
    assert aside in homes and around not in homes


def test_s_sec_1_a_listed_home_swapped_for_a_symlink_is_not_followed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """S-SEC-1: homes are listed resolved; one whose path resolves elsewhere now (a
    component swapped for a symlink since) is not hidden, so no run hides what it points at."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("SUBVISOR_HOME", "")
    home, elsewhere = tmp_path / "project" / "home", tmp_path / "elsewhere"
    home.mkdir(parents=True)
    elsewhere.mkdir()
    register_home(home)
    home.rmdir()
    home.symlink_to(elsewhere)
    assert elsewhere not in known_homes(tmp_path / "mine")


def test_s_sec_1_a_home_whose_path_holds_a_newline_is_refused_by_the_list(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """S-SEC-1: the list holds a path a line, so a home whose path holds a newline is not
    written into it (two half paths would be listed); the caller is told why."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    odd = tmp_path / "a\nb"
    odd.mkdir()
    with pytest.raises(OSError, match="newline"):
        register_home(odd)
    assert not (tmp_path / "user" / ".subvisor" / HOMES_FILE).exists()
