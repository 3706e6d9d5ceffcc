"""What workspace checkpoints cost an agent whose model calls take 200 ms (issue 33).

    python bench/workspace.py             # 20 turns, 3 rounds, SQLite
    python bench/workspace.py --quick     # 8 turns, 1 round
    python bench/workspace.py --url postgresql://postgres@127.0.0.1:5432/test

Each turn of the agent is a step that edits files of a 200-file workspace (8 files
rewritten with new contents of 1-8 KB, one deleted and one created every few turns),
then a model call that takes 200 ms (a sleep). The same agent runs without a workspace
(``plain``: it edits a directory tether knows nothing of) and with one (``workspace``:
each step checkpointed while the model call runs), alternating within each round.

Printed: the median wall time of a run of each, and the overhead of the checkpoints as
a share of the plain run's time (goal: under 5%, because the scan, hash and store
overlap the model call); and the bytes the database gained for the workspace (the
blobs of kind 'workspace' plus the data of the workspace events) against the sum of the
sizes of the files that changed (the first checkpoint counts every file as changed)
(goal: at most 1.2x).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import tether

FILES = 200
MODEL_SECONDS = 0.2


def content(i: int, turn: int) -> bytes:
    rng = random.Random(i * 1000 + turn)
    return rng.randbytes(1024 * rng.randint(1, 8))


def seed(root: Path) -> None:
    for i in range(FILES):
        p = root / f"d{i % 10}" / f"f{i:03}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content(i, 0))


def edit(root: str, turn: int) -> int:
    for m in range(8):
        i = (turn * 13 + m * 25) % FILES
        Path(root, f"d{i % 10}", f"f{i:03}.bin").write_bytes(content(i, turn))
    if turn % 3 == 0:
        Path(root, f"d{turn % 10}", f"f{(turn * 7) % FILES:03}.bin").unlink(missing_ok=True)
        Path(root, "new").mkdir(exist_ok=True)
        Path(root, "new", f"n{turn}.bin").write_bytes(content(FILES + turn, turn))
    return turn


def model(turn: int) -> dict[str, str]:
    time.sleep(MODEL_SECONDS)
    return {"text": f"turn {turn}"}


def tree(root: str) -> dict[str, tuple[str, int]]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = os.path.join(dirpath, name)
            data = Path(p).read_bytes()
            out[os.path.relpath(p, root)] = (hashlib.sha256(data).hexdigest(), len(data))
    return out


def build(url: str, parent: Path) -> tether.App:
    app = tether.open(url)

    @app.agent(name="plain")
    def plain(run: tether.Run, root: str, turns: int) -> int:
        for t in range(1, turns + 1):
            run.step("edit", edit, root, t)
            run.llm("model", model, t)
        return turns

    @app.agent(name="checkpointed", workspace=str(parent / "{run_id}"))
    def checkpointed(run: tether.Run, turns: int) -> int:
        root = run.workspace or ""
        for t in range(1, turns + 1):
            run.step("edit", edit, root, t)
            run.llm("model", model, t)
        return turns

    return app


def changed_bytes(turns: int) -> int:
    """The sizes of the files that changed, turn by turn (the seed: every file)."""
    with tempfile.TemporaryDirectory() as d:
        seed(Path(d))
        before = tree(d)
        total = sum(size for _, size in before.values())
        for t in range(1, turns + 1):
            edit(d, t)
            after = tree(d)
            total += sum(size for p, (sha, size) in after.items() if before.get(p, ("",))[0] != sha)
            before = after
    return total


def stored_bytes(app: tether.App, run_id: str) -> int:
    """The bytes of the run's workspace events plus the workspace blobs in the database."""
    events = sum(len(e.data.encode()) for e in app.events(run_id) if e.type == "workspace")
    blobs = app.store.old_workspace_blobs(float("inf"))
    return events + sum(size for _, size in blobs)


def one_round(url: str, base: Path, turns: int, n: int) -> tuple[float, float, int]:
    app = build(url, base / f"ws{n}")
    plain_dir = base / f"plain{n}"
    plain_dir.mkdir()
    seed(plain_dir)
    t0 = time.perf_counter()
    app.resume(app.start("plain", str(plain_dir), turns))  # as the other: queued, then run
    plain = time.perf_counter() - t0
    run_id = f"bench{n}-{os.getpid()}"
    seed(base / f"ws{n}" / run_id)  # the agent finds its files in place
    t0 = time.perf_counter()
    app.start("checkpointed", turns, run_id=run_id)
    app.resume(run_id)
    checkpointed = time.perf_counter() - t0
    stored = stored_bytes(app, run_id)
    assert tree(str(base / f"ws{n}" / run_id)) == tree(str(plain_dir))
    app.close()
    return plain, checkpointed, stored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url", help="a PostgreSQL URL (default: a SQLite file per round)")
    args = parser.parse_args()
    turns, rounds = (8, 1) if args.quick else (20, 3)
    plains, checks, stores = [], [], []
    with tempfile.TemporaryDirectory() as d:
        for n in range(rounds):
            url = args.url or str(Path(d) / f"bench{n}.db")
            plain, checked, stored = one_round(url, Path(d), turns, n)
            plains.append(plain)
            checks.append(checked)
            stores.append(stored)
    plain, checked = statistics.median(plains), statistics.median(checks)
    changed = changed_bytes(turns)
    print(f"{turns} turns, model calls of {MODEL_SECONDS * 1000:.0f} ms, {rounds} round(s)")
    print(f"plain       {plain:8.3f} s")
    print(f"workspace   {checked:8.3f} s")
    print(f"overhead    {(checked - plain) / plain * 100:7.2f} % of the run (goal < 5%)")
    print(f"changed     {changed:10d} bytes (the files that changed, summed over the turns)")
    print(f"stored      {stores[-1]:10d} bytes (workspace blobs + workspace events)")
    print(f"ratio       {stores[-1] / changed:8.3f} x (goal <= 1.2)")


if __name__ == "__main__":
    main()
