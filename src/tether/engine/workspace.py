"""Workspace checkpoints: a run's working directory, checkpointed after the steps that
may change it and restored on resume.

An agent with a workspace (``tether.open(..., workspace=DIR)`` or
``@app.agent(workspace=DIR)``) gets a :class:`Checkpoints` for each execution
(:func:`attach`). After a ``step`` or ``tool`` call returns, :meth:`Checkpoints.after`
starts a thread that scans the directory, hashes the files whose mtime, size or inode
changed since the last scan (the others keep their digest), stores the new contents
once by SHA-256 (:class:`Blobs`) and builds the ``workspace`` event (the manifest's
change, :mod:`tether.model.workspace`). The journal's next append joins it
(:meth:`Checkpoints.take`) and commits the event just before the step's own record, in
the same transaction: a step is never recorded as done without the files it left.
A model call does not flush the step before it (``Journal.flush``), so the scan runs
while the model answers; anything else (a tool's intent, the next step, the run's end)
joins it first.

On resume, :func:`attach` restores the directory to the manifest of the last committed
``workspace`` event (:func:`restore`): files added since are removed, changed ones
rewritten (to a temporary name, then renamed: atomic per file), modes kept. A restore
writes only below the workspace's directory, through no symbolic link, and every path
read from the log is checked first (:func:`tether.model.workspace.check_path`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.context.artifacts import ArtifactRef, ArtifactStore, DatabaseArtifacts
from tether.errors import ArtifactCorrupt, NotFound, WorkspaceError, WorkspaceLimit
from tether.model import events as ev
from tether.model.clock import Clock, SystemClock
from tether.model.events import NewEvent
from tether.model.workspace import Entry, Manifest, Workspace, change, fold_manifest, has_change
from tether.store import Store

if TYPE_CHECKING:
    from tether.engine.journal import Journal
    from tether.engine.registry import AgentDef
    from tether.model.state import RunState

KINDS = frozenset({"step", "tool"})  # the calls that may change files (a model call: not)
BATCH_BYTES = 8 * 2**20  # file contents stored per transaction, at most (about)
RACY_NS = 2_000_000_000  # a file changed this recently is hashed again next time
Stats = dict[str, tuple[int, int, int]]  # path -> (mtime_ns, size, inode) when last hashed


class Blobs:
    """Where file contents go: the blobs table of the tether database (kind
    ``workspace``, swept by gc once no manifest references them), or the App's artifact
    store when it is another one (a directory, a bucket: never swept)."""

    def __init__(
        self, store: Store, backend: ArtifactStore | None = None, clock: Clock | None = None
    ) -> None:
        self.store = store
        self.clock = clock or SystemClock()
        self.backend = None if isinstance(backend, DatabaseArtifacts) else backend
        self._batch: list[tuple[str, bytes]] = []
        self._size = 0

    def put(self, sha256: str, data: bytes) -> None:
        """Store ``data``: with the next ones, in one transaction (see :meth:`flush`)."""
        if self.backend is not None:
            self.backend.put(data)
            return
        self._batch.append((sha256, data))
        self._size += len(data)
        if self._size >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Store what :meth:`put` was given and not stored yet."""
        if self._batch:
            batch, self._batch, self._size = self._batch, [], 0
            self.store.put_workspace_blobs(batch, self.clock.now())

    def get(self, path: str, entry: Entry, where: str) -> bytes:
        """The verified bytes of ``entry``, or WorkspaceError naming ``path``."""
        try:
            if self.backend is None:
                data = self.store.get_workspace_blob(entry.sha256)
            else:
                data = self.backend.get(ArtifactRef(entry.sha256, entry.size))
        except (NotFound, ArtifactCorrupt):
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise WorkspaceError(
                f"{where}: the content of {path!r} ({entry.sha256}) is missing or damaged "
                f"in the store (an export carries manifests, not file contents); the "
                f"workspace cannot be restored. Restore the database (or artifact "
                f"directory) from a backup"
            )
        return data


@dataclass(frozen=True, slots=True)
class Workspaces:
    """An App's workspace settings: its default (None: agents without one have none) and
    where its file contents go."""

    default: Workspace | None
    blobs: Callable[[], Blobs]


# -- scanning -------------------------------------------------------------------------


def _walk(root: str, cfg: Workspace) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """``(relative path, entry)`` of every file and link below ``root`` that is not
    ignored, never following a link."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
            for entry in it:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if entry.is_dir(follow_symlinks=False):
                    if not cfg.ignores_dir(entry.name, rel):
                        stack.append(rel)
                elif not cfg.ignores_file(entry.name, rel):
                    yield rel, entry


def _inside(root: str, rel: str, target: str) -> bool:
    """Whether link ``rel``'s ``target`` stays inside ``root`` (checked on the text)."""
    where = os.path.normpath(os.path.join(root, os.path.dirname(rel), target))
    return not os.path.isabs(target) and os.path.commonpath([root, where]) == root


class _Tally:
    def __init__(self, cfg: Workspace, root: str) -> None:
        self.cfg, self.root, self.files, self.total = cfg, root, 0, 0

    def add(self, rel: str, size: int) -> None:
        cfg = self.cfg
        self.files += 1
        self.total += size
        if size > cfg.max_file_size:
            self._over("max_file_size", f"{rel!r} is {size} bytes", cfg.max_file_size)
        if self.total > cfg.max_total_size:
            self._over("max_total_size", f"its files reach {self.total} bytes", cfg.max_total_size)
        if self.files > cfg.max_files:
            self._over("max_files", f"it holds more than {cfg.max_files} files", cfg.max_files)

    def _over(self, limit: str, what: str, maximum: int) -> None:
        raise WorkspaceLimit(
            f"workspace {self.root}: {what}, over its limit {limit}={maximum}; no checkpoint "
            f"was taken. Raise it (tether.Workspace(..., {limit}=N)) or add what need not be "
            f"kept to its ignore patterns",
            limit,
        )


def scan(
    root: str, cfg: Workspace, before: Manifest, stats: Stats, put: Callable[[str, bytes], None]
) -> tuple[Manifest, Stats]:
    """The manifest of ``root`` now, and the stats to compare with next time. A file whose
    stat is the one recorded in ``stats`` keeps its digest from ``before``; another is
    read and hashed, and its bytes ``put`` when its digest is new to ``before``."""
    now_ns, tally = time.time_ns(), _Tally(cfg, root)
    manifest: Manifest = {}
    fresh: Stats = {}
    if not os.path.isdir(root):  # the agent removed its directory: it holds nothing
        return manifest, fresh
    for rel, entry in _walk(root, cfg):
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(entry.path)
            if not _inside(root, rel, target):
                continue  # a link out of the workspace is neither kept nor followed
            data: bytes | None = os.fsencode(target)
        elif stat.S_ISREG(st.st_mode):
            data = None
        else:
            continue  # a socket, a fifo, a device: not a file to keep
        tally.add(rel, st.st_size)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        old = before.get(rel)
        if data is None and old is not None and stats.get(rel) == key:
            manifest[rel] = Entry(old.sha256, stat.S_IFREG | (st.st_mode & 0o777), old.size)
        else:
            data = data if data is not None else _read(entry.path)
            sha = hashlib.sha256(data).hexdigest()
            if old is None or old.sha256 != sha:
                put(sha, data)
            manifest[rel] = Entry(sha, stat.S_IFMT(st.st_mode) | (st.st_mode & 0o777), len(data))
        if st.st_mtime_ns < now_ns - RACY_NS:
            fresh[rel] = key
    return manifest, fresh


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- restoring ------------------------------------------------------------------------


def restore(root: str, cfg: Workspace, manifest: Manifest, blobs: Blobs, where: str) -> None:
    """Make ``root`` hold exactly ``manifest`` (ignored paths aside): remove what it does
    not name, write what differs. Every file is written to a temporary name beside it and
    renamed over; no write goes through a link or above ``root``."""
    os.makedirs(root, exist_ok=True)
    real = os.path.realpath(root)
    present = {rel: e.path for rel, e in _walk(real, cfg)}
    for rel in sorted(set(present) - set(manifest)):
        os.unlink(present[rel])
        _prune(real, os.path.dirname(rel))
    for rel, entry in sorted(manifest.items()):
        if rel in present and _same(present[rel], entry):
            continue
        data = blobs.get(rel, entry, where)
        if entry.is_link and not _inside(real, rel, os.fsdecode(data)):
            raise WorkspaceError(f"{where}: the link {rel!r} points out of the workspace; refused")
        parent = _directory(real, os.path.dirname(rel), where)
        _put_file(os.path.join(parent, os.path.basename(rel)), entry, data)


def _same(path: str, entry: Entry) -> bool:
    st = os.lstat(path)
    if stat.S_IFMT(st.st_mode) != stat.S_IFMT(entry.mode) or st.st_size != entry.size:
        return False
    data = os.fsencode(os.readlink(path)) if entry.is_link else _read(path)
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        return False
    if not entry.is_link and (st.st_mode & 0o777) != (entry.mode & 0o777):
        os.chmod(path, entry.mode & 0o777)
    return True


def _directory(real: str, rel_dir: str, where: str) -> str:
    """The real directory ``real/rel_dir``, made if missing; a file or link in its way
    (inside the workspace) is replaced by a directory."""
    path = real
    for part in rel_dir.split("/") if rel_dir else []:
        path = os.path.join(path, part)
        if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
            os.unlink(path)
        os.makedirs(path, exist_ok=True)
    if os.path.commonpath([real, os.path.realpath(path)]) != real:  # defence in depth
        raise WorkspaceError(f"{where}: {rel_dir!r} leads out of the workspace {real}; refused")
    return path


def _put_file(target: str, entry: Entry, data: bytes) -> None:
    if os.path.isdir(target) and not os.path.islink(target):
        shutil.rmtree(target)
    parent = os.path.dirname(target)
    if entry.is_link:
        tmp = os.path.join(parent, f".tether-{os.urandom(6).hex()}")
        os.symlink(os.fsdecode(data), tmp)
        os.replace(tmp, target)
        return
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=".tether-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), entry.mode & 0o777)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _prune(real: str, rel_dir: str) -> None:
    """Remove the directories a removal left empty, up to the workspace's root."""
    while rel_dir:
        try:
            os.rmdir(os.path.join(real, rel_dir))
        except OSError:
            return
        rel_dir = os.path.dirname(rel_dir)


# -- one execution --------------------------------------------------------------------


class _Pending:
    """A checkpoint being taken in a thread, for the step whose record is ``before``."""

    def __init__(self, target: Callable[[], NewEvent | None], before: NewEvent) -> None:
        self.before = before
        self.result: NewEvent | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self.thread.start()

    def _run(self, target: Callable[[], NewEvent | None]) -> None:
        try:
            self.result = target()
        except BaseException as e:  # raised in the agent's thread by take()
            self.error = e


class Checkpoints:
    """One execution's workspace: the manifest of its last checkpoint, the stats of its
    files, and the checkpoint being taken (see the module docstring)."""

    def __init__(
        self,
        journal: Journal,
        cfg: Workspace,
        root: str,
        blobs: Blobs,
        manifest: Manifest,
        owned: int = 0,
    ) -> None:
        self.journal, self.cfg, self.root, self.blobs = journal, cfg, root, blobs
        self.manifest = manifest
        self.owned = owned  # the directories tether made for the run (see check_root)
        self.stats: Stats = {}
        self.pending: _Pending | None = None
        self.done: list[_Pending] = []  # taken, not appended yet (a fan-out's branches)

    def checkpoint(
        self, pos: int, *, first: bool = False, at: float | None = None
    ) -> NewEvent | None:
        """Scan now; the ``workspace`` event of what changed since the last checkpoint
        (None: nothing did, unless it is the ``first``: a run's first is always kept, so
        that a resume knows the files it started with, even none)."""
        check_root(self.root, self.owned, f"run {self.journal.run_id}")
        manifest, self.stats = scan(self.root, self.cfg, self.manifest, self.stats, self.blobs.put)
        self.blobs.flush()
        data = {**({"pos": pos} if pos else {}), **change(self.manifest, manifest)}
        self.manifest = manifest
        if not (first or has_change(data)):
            return None
        j = self.journal  # dated as its step's record (``at``): the files after that step
        return ev.new(ev.WORKSPACE, data, j.clock.now() if at is None else at, j.actor)

    def overlaps(self, kind: str) -> bool:
        """Whether a call of ``kind`` may run while the last step's checkpoint is taken
        (and its record waits for it): a model call, which changes no file."""
        return kind == "llm" and (self.pending is not None or bool(self.done))

    def after(self, kind: str, pos: int, record: NewEvent) -> None:
        """A call returned and its ``record`` is about to be appended or deferred: start
        its checkpoint in a thread, if a call of this kind may change files."""
        if kind in KINDS:
            with self.journal.lock:
                self._settle()  # a fan-out's branch: one scan at a time
                self.pending = _Pending(lambda: self.checkpoint(pos, at=record.at), record)

    def _settle(self) -> None:
        if self.pending is not None:
            self.pending.thread.join()
            self.done.append(self.pending)
            self.pending = None

    def take(self, deferred: list[NewEvent], events: list[NewEvent]) -> list[NewEvent]:
        """Before an append of ``deferred`` (the journal's, changed in place) then
        ``events``: join the checkpoints being taken and put each event just before its
        step's record; return the events. A checkpoint that failed (a limit, a file that
        cannot be read) is raised, and its steps' records dropped: they are not done."""
        self._settle()
        done, self.done = self.done, []
        failed = [p.error for p in done if p.error is not None]
        if failed:
            records = [p.before for p in done]
            deferred[:] = [e for e in deferred if not any(e is r for r in records)]
            raise failed[0]
        events = list(events)
        for p in done:
            if p.result is not None:
                _place(p.result, p.before, deferred, events)
        return events


def _place(
    event: NewEvent, record: NewEvent, deferred: list[NewEvent], events: list[NewEvent]
) -> None:
    """Put ``event`` just before ``record`` in whichever list holds it (else first)."""
    for batch in (events, deferred):
        for i, e in enumerate(batch):
            if e is record:
                batch.insert(i, event)
                return
    deferred.insert(0, event)


def configured(ws: Workspaces | None, d: AgentDef) -> bool:
    """Whether runs of ``d`` work in a workspace (the agent's, or the App's default)."""
    return ws is not None and (d.workspace or ws.default) is not None


def attach(ws: Workspaces | None, d: AgentDef, state: RunState, journal: Journal) -> None:
    """Give ``journal`` the Checkpoints of its run when its agent (or the App) has a
    workspace: restore the directory to the last checkpoint in the log, or take and
    commit the first one (pos 0) before anything runs."""
    if ws is None or not configured(ws, d):
        return
    cfg = d.workspace or ws.default
    assert cfg is not None
    found = [e for e in journal.store.read_events(journal.run_id) if e.type in _READ]
    forked = recorded_root(found)
    root = forked or cfg.root_for(journal.run_id)
    steps = [(e.seq, e.payload()) for e in found if e.type == ev.WORKSPACE]
    manifest = fold_manifest(steps, journal.run_id)
    cp = Checkpoints(journal, cfg, root, ws.blobs(), manifest, _owned(cfg, forked))
    try:
        check_root(root, cp.owned, f"run {journal.run_id}")
        if steps:
            restore(root, cfg, manifest, cp.blobs, f"run {journal.run_id}")
        else:
            os.makedirs(root, exist_ok=True)
        first = cp.checkpoint(journal.pos, first=not steps)  # stats of the files as they are
    except BaseException:
        journal.store.release(journal.run_id, epoch=journal.lease.epoch)  # resumable at once
        raise
    if first is not None:
        journal.append([first])
    journal.workspace = cp


def _owned(cfg: Workspace, forked: str | None) -> int:
    """How many directories of a run's root, counted up from it, tether made itself: a
    fork's directory (new and empty when forked), or the levels from the first one named
    by ``{run_id}`` down; none for a fixed path, which is the operator's."""
    if forked is not None:
        return 1
    parts = os.path.normpath(cfg.path).split(os.sep)
    found = [i for i, part in enumerate(parts) if "{run_id}" in part]
    return len(parts) - found[0] if found else 0


def check_root(root: str, owned: int, where: str) -> None:
    """Refuse a run directory that tether made when it, or one of the directories tether
    made above it, is now a link: someone put it there, and a restore through it would
    delete and write files outside the workspace (a scan would read them in). A fixed
    workspace path may be a link: the operator chose it."""
    path = root
    for _ in range(owned):
        if os.path.islink(path):
            raise WorkspaceError(
                f"{where}: its workspace directory {path} is now a link (to "
                f"{os.readlink(path)!r}); tether made that directory for the run, so a link "
                f"there was put by someone else, and going through it would change files "
                f"outside the workspace. Nothing was written: remove the link (the run's "
                f"files are restored into a new directory when it resumes)"
            )
        path = os.path.dirname(path)


class Untouched(Checkpoints):
    """A dry replay's workspace (``tether check``): the run's directory, as ``run.workspace``
    names it to the agent (a tool's arguments may hold it), never scanned nor written."""

    def __init__(self, root: str) -> None:
        self.root, self.pending, self.done = root, None, []

    def after(self, kind: str, pos: int, record: NewEvent) -> None:
        return None

    def take(self, deferred: list[NewEvent], events: list[NewEvent]) -> list[NewEvent]:
        return events


def untouched(cfg: Workspace | None, journal: Journal) -> Untouched | None:
    """The Untouched workspace of a dry replay of ``journal``'s run, if it has one."""
    if cfg is None:
        return None
    found = [e for e in journal.store.read_events(journal.run_id) if e.type in _READ]
    return Untouched(recorded_root(found) or cfg.root_for(journal.run_id))


_READ = frozenset({ev.WORKSPACE, ev.RUN_FORKED})


def recorded_root(found: list[Any]) -> str | None:
    """The directory the run's last fork named (``tether fork --workspace DIR``), if
    any: the forks before it named their parents' directories."""
    forks = [e.payload() for e in found if e.type == ev.RUN_FORKED]
    root = forks[-1].get("workspace") if forks else None
    return root if isinstance(root, str) and os.path.isabs(root) else None
