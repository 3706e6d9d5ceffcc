"""`tether worker --metrics-port`: a real worker process serves Prometheus text whose
counts match the runs it executed, on both backends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tether

pytestmark = pytest.mark.acceptance

# each run: one model call reporting usage, one step that fails once and is retried
WORKLOAD = """
import os, tether
app = tether.open(os.environ["TETHER_TEST_DB"])
flaky = {}

def model(n):
    return {"text": "hi", "usage": {"input_tokens": 10 * n, "output_tokens": 3, "cost": 0.5}}

def shaky(key):
    flaky[key] = flaky.get(key, 0) + 1
    if flaky[key] == 1:
        raise ConnectionError("first attempt fails")
    return key

@app.agent
def chat(run, n):
    run.llm("ask", model, n)
    return run.step("shaky", shaky, n, retry=tether.Retry(max_attempts=2, backoff=0.01))

@app.agent
def idle(run):
    return 1
"""

RUNS = (1, 2, 3)


def _families(url: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read().decode()
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(body):
        out[fam.name] = [(s.name, s.labels, s.value) for s in fam.samples]
    return out


def _value(
    fams: dict[str, list[tuple[str, dict[str, str], float]]], sample: str, **labels: str
) -> float:
    return sum(
        v
        for samples in fams.values()
        for name, got, v in samples
        if name == sample and all(got.get(k) == w for k, w in labels.items())
    )


def test_worker_serves_metrics_of_the_runs_it_executed(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_DB", url)
    (tmp_path / "work.py").write_text(WORKLOAD)
    env = {**os.environ, "TETHER_TEST_DB": url, "PYTHONUNBUFFERED": "1"}
    sys.path.insert(0, str(tmp_path))
    try:
        import work
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("work", None)
    try:
        ids = [work.app.start(work.chat, n) for n in RUNS]
        work.app.start(work.idle, queue="elsewhere")  # queued in a queue nobody claims
    finally:
        work.app.close()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "--app",
            f"{tmp_path / 'work.py'}:app",
            "worker",
            "--metrics-port",
            "0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        line = ""
        while "metrics at " not in line:
            line = worker.stdout.readline()
            assert line, f"the worker exited: {worker.stderr.read() if worker.stderr else ''}"
        endpoint = line.split("metrics at ", 1)[1].strip()
        assert endpoint.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 60
        fams = _families(endpoint)
        while _value(fams, "tether_executions_total") < len(RUNS):
            assert time.monotonic() < deadline, "the worker did not execute its runs"
            time.sleep(0.1)
            fams = _families(endpoint)
        check = tether.open(url)
        try:
            # a run's execution is counted when its agent returns; its final event is
            # committed just after (posted, not awaited: the worker's group commit)
            while not all(check.get(i).status == "completed" for i in ids):
                assert time.monotonic() < deadline, "the runs did not complete"
                time.sleep(0.05)
        finally:
            check.close()
        fams = _families(endpoint)  # the gauges below are read at this scrape, after that
        n = len(RUNS)
        assert _value(fams, "tether_executions_total", agent="chat", outcome="completed") == n
        assert _value(fams, "tether_model_call_seconds_count", agent="chat") == n
        assert _value(fams, "tether_step_seconds_count", kind="llm", agent="chat") == n
        assert _value(fams, "tether_step_seconds_count", kind="step", agent="chat") == n
        assert _value(fams, "tether_step_retries_total", kind="step", agent="chat") == n
        assert _value(fams, "tether_tokens_total", agent="chat", direction="input") == 60
        assert _value(fams, "tether_tokens_total", agent="chat", direction="output") == 3 * n
        assert _value(fams, "tether_cost_total", agent="chat") == pytest.approx(0.5 * n)
        assert _value(fams, "tether_leases_lost_total") == 0
        # the database's gauges, read at the scrape
        assert _value(fams, "tether_database_up") == 1
        assert _value(fams, "tether_runs", status="queued", agent="idle") == 1
        assert _value(fams, "tether_runs", agent="chat") == 0  # finished: not gauged
        assert _value(fams, "tether_queue_depth", queue="elsewhere") == 1
        assert _value(fams, "tether_queue_oldest_wait_seconds", queue="elsewhere") > 0
        assert _value(fams, "tether_runs_in_doubt") == 0
        assert _value(fams, "tether_workers_live") == 1
        assert len(fams["tether_worker_heartbeat_age_seconds"]) == 1
    finally:
        worker.terminate()
        worker.wait(timeout=30)
