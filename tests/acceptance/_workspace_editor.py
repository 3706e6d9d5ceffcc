"""An agent editing 200 files over 50 steps, run in child processes by
test_workspace_crash.py.

usage: python _workspace_editor.py URL WS_PARENT start|resume RUN_ID
                                   [--kill STEP PHASE] [--inspect]

``--kill STEP PHASE`` SIGKILLs the process in step STEP: ``mid-edit`` (half of the
step's files written), ``after-step`` (the step returned: its checkpoint is being
taken) or ``in-llm`` (in the model call after it). ``--inspect`` exits (without a
word to tether, as a crash would) at the top of the agent, once the workspace is
restored and before any step replays, so that the test can read the restored tree.
:func:`plan` is the edits, also read by the test to compute the trees it expects.
"""

from __future__ import annotations

import os
import signal
import sys
import time

STEPS = 50
FILES = 200


def _path(i: int) -> str:
    return f"d{i % 10}/f{i:03}.txt"


def plan(j: int) -> list[tuple[str, str, bytes, int]]:
    """Step ``j``'s edits, in order: ``("write", path, bytes, mode)``, ``("delete", path,
    b"", 0)`` or ``("chmod", path, b"", mode)``."""
    if j == 1:
        return [("write", _path(i), f"{i}:1\n".encode() * (1 + i % 5), 0o644) for i in range(FILES)]
    ops = []
    for m in range(8):
        i = (j * 13 + m * 25) % FILES
        ops.append(("write", _path(i), f"{i}:{j}\n".encode() * (1 + (i + j) % 5), 0o644))
    if j % 5 == 0:
        ops.append(("delete", _path((j * 7) % FILES), b"", 0))
    if j % 3 == 0:
        ops.append(("chmod", _path((j * 11) % FILES), b"", 0o755))
    if j % 4 == 0:
        ops.append(("write", f"new/n{j}.txt", f"new {j}".encode(), 0o600))
    return ops


def apply(root: str, ops: list[tuple[str, str, bytes, int]], kill_half: bool) -> None:
    for n, (op, path, data, mode) in enumerate(ops):
        if kill_half and n == len(ops) // 2:
            os.kill(os.getpid(), signal.SIGKILL)
        full = os.path.join(root, path)
        if op == "write":
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
            os.chmod(full, mode)
        elif op == "delete":
            if os.path.exists(full):
                os.unlink(full)
        elif os.path.exists(full):
            os.chmod(full, mode)


def main() -> None:
    import tether

    url, parent, cmd = sys.argv[1], sys.argv[2], sys.argv[3]
    kill = (0, "")
    if "--kill" in sys.argv:
        at = sys.argv.index("--kill")
        kill = (int(sys.argv[at + 1]), sys.argv[at + 2])
    inspect = "--inspect" in sys.argv
    app = tether.open(url, workspace=os.path.join(parent, "{run_id}"))

    def edit(root: str, j: int) -> int:
        apply(root, plan(j), kill == (j, "mid-edit"))
        return j

    def think(j: int) -> dict[str, str]:
        if kill == (j, "in-llm"):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.02)  # the model's answer takes a while: the checkpoint overlaps it
        return {"text": f"step {j} done"}

    @app.agent(name="editor")
    def editor(run: tether.Run) -> int:
        if inspect:
            os._exit(0)  # restored, nothing replayed: the test reads the tree
        root = run.workspace
        assert root is not None
        for j in range(1, STEPS + 1):
            run.step("edit", edit, root, j)
            if kill == (j, "after-step"):
                os.kill(os.getpid(), signal.SIGKILL)
            run.llm("think", think, j)
        return STEPS

    if cmd == "start":
        run_id = app.start("editor")  # queued: executed by the resume below
        print(run_id, flush=True)
        handle = app.resume(run_id)
    else:
        handle = app.resume(sys.argv[4])
    print(f"DONE {handle.id} {handle.status}", flush=True)


if __name__ == "__main__":
    main()
