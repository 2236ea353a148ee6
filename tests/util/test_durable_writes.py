"""Local metadata files and their folders are durable before a commit names them
(``metastore.util.durable_writes``): the file's bytes, its name in its folder and the name of
every folder made for it, synced when the node runs with ``--fsync``; nothing synced
without it. A power loss cannot be staged here, so the syncs themselves are recorded:
each call still reaches the kernel, and the path it synced is read back from
``/proc/self/fd``."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from metastore.config.server_config import ServerConfig
from metastore.errors import StorageUnavailable
from metastore.http.typedefs import ICEBERG
from metastore.iceberg.files import TableFiles
from metastore.node.app import create_app
from metastore.util import durable_writes
from metastore.util.durable_writes import begin_file, create_file, make_folders


class Syncs:
    """Every ``fsync`` and ``fdatasync`` of this process: (call, path synced)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str]] = []
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._recorded(name, getattr(os, name)))

    def _recorded(self, name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            self.calls.append((name, os.readlink(f"/proc/self/fd/{fd}")))
            real(fd)

        return sync

    def under(self, root: Path) -> set[tuple[str, str]]:
        return {(name, path) for name, path in self.calls if path.startswith(str(root))}


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Syncs:
    return Syncs(monkeypatch)


@pytest.fixture
def failing_fdatasync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file's sync fails as a failing disk's does."""

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)


def test_a_new_file_its_name_and_each_folder_made_for_it_are_synced(
    tmp_path: Path, syncs: Syncs
) -> None:
    (tmp_path / "t").mkdir()
    path = tmp_path / "t" / "a" / "b" / "00000-x.metadata.json"
    create_file(str(path), b'{"a":1}', sync=True)
    assert path.read_bytes() == b'{"a":1}'
    assert syncs.under(tmp_path) == {
        ("fdatasync", str(path)),  # the bytes
        ("fsync", str(tmp_path / "t" / "a" / "b")),  # the file's name
        ("fsync", str(tmp_path / "t" / "a")),  # the folder b
        ("fsync", str(tmp_path / "t")),  # the folder a
    }


def test_a_file_in_a_folder_that_exists_syncs_the_file_and_its_name(
    tmp_path: Path, syncs: Syncs
) -> None:
    path = tmp_path / "00001-y.metadata.json"
    create_file(str(path), b"{}", sync=True)
    assert syncs.under(tmp_path) == {("fdatasync", str(path)), ("fsync", str(tmp_path))}
    make_folders(str(tmp_path), sync=True)  # nothing made: nothing to sync
    assert len(syncs.under(tmp_path)) == 2


def test_the_syncs_of_one_write_run_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new table's metadata file: its bytes, its name and the names of the two folders
    made for it. Each sync here waits until all four have started, so syncs made one
    after another would leave the first waiting alone until the barrier breaks."""
    started = threading.Barrier(4, timeout=10)

    def waiting(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            started.wait()
            real(fd)

        return sync

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, waiting(getattr(os, name)))
    (tmp_path / "ns").mkdir()
    path = tmp_path / "ns" / "t" / "metadata" / "00000-x.metadata.json"
    create_file(str(path), b"{}", sync=True)
    assert path.read_bytes() == b"{}" and not started.broken


def test_a_folder_sync_that_fails_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder's sync fails in the pool's thread: the write raises it and deletes the
    file it wrote."""
    real = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "t"):
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    (tmp_path / "t").mkdir()
    path = tmp_path / "t" / "metadata" / "00000-x.metadata.json"
    with pytest.raises(OSError, match="Input/output error"):
        create_file(str(path), b"{}", sync=True)
    assert not path.exists()


def test_begin_file_returns_with_the_bytes_written_and_its_syncs_running(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's own sync is held until the test lets it go: ``begin_file`` has returned
    by then, and ``wait`` returns only after it."""
    release, held = threading.Event(), threading.Event()
    recorded = os.fdatasync  # the ``syncs`` recorder

    def holding(fd: int) -> None:
        held.set()
        assert release.wait(10), "the test never released the sync"
        recorded(fd)

    monkeypatch.setattr(os, "fdatasync", holding)
    path = tmp_path / "t" / "metadata" / "00001-x.metadata.json"
    (tmp_path / "t" / "metadata").mkdir(parents=True)
    syncing = begin_file(str(path), b'{"a":1}')
    assert path.read_bytes() == b'{"a":1}'
    assert held.wait(10)  # running in the pool, not done
    waited = threading.Event()
    waiter = threading.Thread(target=lambda: (syncing.wait(), waited.set()))
    waiter.start()
    assert not waited.is_set()  # the file's sync cannot have finished: it is held
    release.set()
    waiter.join(10)
    assert waited.is_set()
    assert syncs.under(tmp_path) == {
        ("fdatasync", str(path)),
        ("fsync", str(tmp_path / "t" / "metadata")),
    }


def test_a_begun_file_whose_sync_fails_is_deleted_by_the_wait(
    tmp_path: Path, failing_fdatasync: None
) -> None:
    path = tmp_path / "00001-x.metadata.json"
    syncing = begin_file(str(path), b"{}")
    for _ in range(2):  # the failure stays: every wait raises it
        with pytest.raises(OSError, match="Input/output error"):
            syncing.wait()
        assert not path.exists()


def test_begin_file_never_replaces_a_file(tmp_path: Path) -> None:
    path = tmp_path / "00001-x.metadata.json"
    path.write_bytes(b"theirs")
    with pytest.raises(FileExistsError):
        begin_file(str(path), b"mine")
    assert path.read_bytes() == b"theirs"


# Python 3.12 on warns of any fork of a process with threads: this one is the point
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_syncs_with_its_own_threads(tmp_path: Path) -> None:
    """The folder syncs' threads were started here; a child forked now has none of them
    and must still finish a synced write (it would wait forever on the parent's)."""
    create_file(str(tmp_path / "a" / "f.json"), b"{}", sync=True)  # two threads, idle soon
    parents = durable_writes._SYNCS
    pid = os.fork()
    if pid == 0:  # the child: exit 0 once a synced write (one folder) in its own pool returned
        code = 1
        try:
            if durable_writes._SYNCS is not parents:
                create_file(str(tmp_path / "a" / "g.json"), b"{}", sync=True)
                code = 0 if (tmp_path / "a" / "g.json").exists() else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the child's synced write never returned")
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_without_fdatasync_the_bytes_are_synced_with_fsync(
    tmp_path: Path, syncs: Syncs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "fdatasync")  # as on macOS
    path = tmp_path / "f.json"
    create_file(str(path), b"{}", sync=True)
    assert syncs.under(tmp_path) == {("fsync", str(path)), ("fsync", str(tmp_path))}


def test_without_sync_nothing_is_synced(tmp_path: Path, syncs: Syncs) -> None:
    path = tmp_path / "a" / "b" / "f.json"
    create_file(str(path), b"{}", sync=False)
    make_folders(str(tmp_path / "c" / "d"), sync=False)
    assert path.read_bytes() == b"{}" and (tmp_path / "c" / "d").is_dir()
    assert syncs.under(tmp_path) == set()


def test_a_sync_that_fails_leaves_no_file_and_is_a_503(
    tmp_path: Path, failing_fdatasync: None
) -> None:
    location = (tmp_path / "t" / "metadata" / "00000-a.metadata.json").as_uri()
    with pytest.raises(StorageUnavailable, match="cannot write"):
        TableFiles(dict, sync=True).write_text('{"a":1}', location)
    assert not (tmp_path / "t" / "metadata" / "00000-a.metadata.json").exists()
    TableFiles(dict, sync=False).write_text('{"a":1}', location)  # no sync: written


def test_a_file_written_through_file_io_is_made_durable_when_local(
    tmp_path: Path, syncs: Syncs
) -> None:
    path = tmp_path / "snap-1-rebased.avro"
    files = TableFiles(dict, sync=True)
    with files.io(path.as_uri()).new_output(path.as_uri()).create() as out:
        out.write(b"avro")
    files.make_durable(path.as_uri())
    assert syncs.under(tmp_path) == {("fdatasync", str(path)), ("fsync", str(tmp_path))}
    TableFiles(dict, sync=False).make_durable(path.as_uri())
    TableFiles(dict, sync=True).make_durable("s3://bucket/t/snap-1.avro")  # a PUT: durable
    assert len(syncs.calls) == 2
    with pytest.raises(StorageUnavailable, match="cannot write"):  # gone: nothing to sync
        files.make_durable((tmp_path / "missing.avro").as_uri())


@pytest.fixture(params=[True, False], ids=["fsync", "no-fsync"])
async def node(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[TestClient[Any, Any]]:
    config = ServerConfig(data_dir=tmp_path / "data", fsync=request.param)
    async with TestClient(TestServer(create_app(config))) as client:
        yield client


async def test_a_node_syncs_the_metadata_files_it_writes_as_it_syncs_its_commits(
    node: TestClient[Any, Any], syncs: Syncs, tmp_path: Path
) -> None:
    fsync = node.app[ICEBERG].warehouse.sync
    schema = {
        "type": "struct",
        "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
    }

    async def post(path: str, body: dict[str, Any]) -> Any:
        async with node.post(path, json=body) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    await post("/v1/default/namespaces", {"namespace": ["ns"]})
    await post("/v1/default/namespaces/ns/tables", {"name": "t", "schema": schema})
    before = len(syncs.calls)  # the first create also made the catalog's folders
    answer = await post("/v1/default/namespaces/ns/tables", {"name": "u", "schema": schema})
    metadata = answer["metadata-location"].removeprefix("file://")
    table = os.path.dirname(os.path.dirname(metadata))
    made = [call for call in syncs.calls[before:] if call[1].startswith(str(tmp_path))]
    if fsync:  # each once: the bytes, the file's name, metadata/ and data/, the table's
        assert sorted(made) == sorted(
            [
                ("fdatasync", metadata),
                ("fsync", os.path.dirname(metadata)),
                ("fsync", table),
                ("fsync", os.path.dirname(table)),
            ]
        )
    else:
        assert syncs.under(tmp_path) == set()


async def _table_t(client: TestClient[Any, Any]) -> str:
    """Namespace ``ns`` and its table ``t`` (no columns); the table's metadata file."""
    async with client.post("/v1/default/namespaces", json={"namespace": ["ns"]}) as response:
        assert response.status == 200
    body = {"name": "t", "schema": {"type": "struct", "fields": []}}
    async with client.post("/v1/default/namespaces/ns/tables", json=body) as response:
        assert response.status == 200
        location: str = (await response.json())["metadata-location"]
    return location.removeprefix("file://")


async def test_a_commit_step_syncs_its_metadata_file_before_the_commit_lands(
    node: TestClient[Any, Any], syncs: Syncs, tmp_path: Path
) -> None:
    """The step's two syncs (its file's bytes and its name) run while its commit is built
    and are waited for before the commit's own write: each made once, with ``--fsync``."""
    fsync = node.app[ICEBERG].warehouse.sync
    await _table_t(node)
    before = len(syncs.calls)
    step = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "1"}}]}
    async with node.post("/v1/default/namespaces/ns/tables/t", json=step) as response:
        assert response.status == 200, await response.text()
        metadata = (await response.json())["metadata-location"].removeprefix("file://")
    made = [call for call in syncs.calls[before:] if call[1].startswith(str(tmp_path))]
    if fsync:
        assert sorted(made) == [("fdatasync", metadata), ("fsync", os.path.dirname(metadata))]
    else:
        assert made == []


async def test_a_commit_step_whose_file_cannot_be_synced_is_a_503_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = ServerConfig(data_dir=tmp_path / "data", fsync=True)
    async with TestClient(TestServer(create_app(config))) as client:
        created = await _table_t(client)
        real = os.fdatasync

        def failing(fd: int) -> None:  # the step's new file only
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".metadata.json"):
                raise OSError(errno.EIO, "Input/output error")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", failing)
        update = {"action": "set-properties", "updates": {"a": "1"}}
        step = {"requirements": [], "updates": [update]}
        async with client.post("/v1/default/namespaces/ns/tables/t", json=step) as response:
            assert response.status == 503, await response.text()
            error = (await response.json())["error"]
            assert "Input/output error" in error["message"]
        monkeypatch.setattr(os, "fdatasync", real)
        async with client.get("/v1/default/namespaces/ns/tables/t") as response:
            loaded = await response.json()
        assert loaded["metadata-location"].removeprefix("file://") == created
        assert "a" not in loaded["metadata"]["properties"]
        assert os.listdir(os.path.dirname(created)) == [os.path.basename(created)]
        # the failed sync deleted the file; the commit's cleanup finding it gone is no failure
        assert not [r for r in caplog.records if r.getMessage().startswith("could not delete")]
