"""One process of ``bench/queues.py``: ``python bench/queue_proc.py SYSTEM ROLE PARAMS_JSON``.

SYSTEM is ``tether`` or ``dbos`` (modules ``queue_tether``, ``queue_dbos``).
ROLE ``enqueue`` enqueues every run and prints ``RESULT {"seconds": …}``.
ROLE ``worker`` prepares (imports, opens the store or constructs DBOS), prints
``READY``, waits for ``GO`` on stdin, executes runs, and prints ``RESULT {…}``
with the time it got ``GO``, the time it finished and the CPU time it used in
between (all its threads). A DBOS worker executes
until ``STOP`` arrives on stdin (DBOS workers do not exit when the queue is
empty); a tether worker stops by itself once the queue is empty.
A worker whose params hold ``pin_cpu`` runs on that CPU alone (set before any of its
threads starts); a tether worker pins itself instead (``cpu`` in its params).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any


def _line() -> str:
    return sys.stdin.readline().strip()


def main() -> int:
    system, role, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if "pin_cpu" in params:  # before any thread starts: every thread inherits it
        os.sched_setaffinity(0, {params["pin_cpu"]})
    module: Any = importlib.import_module(f"queue_{system}")
    try:
        if role == "enqueue":
            t = time.perf_counter()
            module.enqueue(params)
            result: dict[str, Any] = {"seconds": time.perf_counter() - t}
        else:
            module.prepare_worker(params)
            print("READY", flush=True)
            if _line() != "GO":
                return 1
            go, cpu = time.time(), time.process_time()
            result = module.run_worker(params, _line)
            result.update(go=go, done=time.time(), cpu_s=time.process_time() - cpu)
    except Exception:
        print("RESULT " + json.dumps({"error": traceback.format_exc()}), flush=True)
        return 1
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
