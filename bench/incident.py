"""A recorded long agent session: an on-call agent investigating a checkout slowdown.

Used by bench/context_replay.py and by the test that replays it
(tests/integration/test_context_replay.py). Deterministic: the same calls, texts and
tool outputs every time.

The session has :data:`CALLS` model calls (80) over :data:`TOOLS` (12 tools). Every call
is an assistant message (its reasoning: what the last result showed, what it calls now
and usually what it will look at next) followed by one tool result of 0.5 to 9 KB (logs,
metrics, traces, code, query rows, configs). Each call lists the facts it relies on
(``uses``): exact strings from earlier tool results. Like real agents, the assistant
restates the key finding of a result in its next message, so most facts stay visible
after the result itself is paged out; the composition of what a cache has to get right:

* 2 calls use a raw detail of a result more than 3 turns old that no message restated
  (a line number in a file read at call 14, a runbook URL read at call 22);
* 1 call is the first use of a tool that nothing announced (``http_get`` at call 70);
* 5 results repeat an earlier one byte for byte (``get_config`` and ``list_pods`` again).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

SYSTEM = (
    "You are the on-call assistant for the shop platform. Investigate with the tools, "
    "state what each result shows, cite ids, and end with the cause, the fix and the owner."
)
TASK = (
    "Checkout has been slow since about 14:00 UTC today (p99 alerts firing). Find the "
    "cause, check whether a deploy is involved, and propose a fix with its owner. Start "
    "with get_alerts, get_metrics and list_deploys."
)


def _schema(name: str, description: str, **params: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        p: {"type": "integer" if t == "int" else "string", "description": f"{p}: {t}"}
        for p, t in params.items()
    }
    props["timeout_s"] = {"type": "integer", "description": "give up after this many seconds"}
    props["format"] = {"type": "string", "enum": ["json", "text"], "description": "output"}
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": props, "required": [next(iter(params))]},
    }


TOOLS: list[dict[str, Any]] = [
    _schema(
        "search_logs",
        "Search the structured logs of a service. Returns matching lines, newest first, "
        "with timestamp, level, pod and message; at most `limit` lines.",
        query="a search expression (words, field:value)",
        service="the service name",
        window="a time window such as 14:00-14:30",
        limit="int",
    ),
    _schema(
        "get_metrics",
        "Read a metric series (one point per 30 s) for a service: latency percentiles, "
        "error rates, saturation. Returns the points and a summary.",
        metric="the metric name, e.g. http_p99_ms",
        service="the service name",
        window="a time window",
    ),
    _schema(
        "list_deploys",
        "List the deploys of a service or of the whole fleet since a time: id, service, "
        "version, author, time, status.",
        since="a time such as 12:00",
        service="a service name or * for all",
    ),
    _schema(
        "get_trace",
        "Fetch one distributed trace by id: every span with its service, operation, "
        "duration and tags.",
        trace_id="the trace id",
    ),
    _schema(
        "read_file",
        "Read a source file of the monorepo at a revision. Returns numbered lines.",
        path="the path in the repository",
        revision="a commit, tag or branch",
    ),
    _schema(
        "grep_code",
        "Search the monorepo for a pattern. Returns file:line:text matches.",
        pattern="a regular expression",
        path="a directory to limit the search",
    ),
    _schema(
        "query_db",
        "Run a read-only SQL query on the orders database replica. Returns rows as JSON.",
        sql="a SELECT statement",
        database="orders or inventory",
    ),
    _schema(
        "get_config",
        "Read the live configuration (environment and flags) of a service.",
        service="the service name",
        environment="prod or staging",
    ),
    _schema(
        "list_pods",
        "List the pods of a service: name, node, status, restarts, age, CPU and memory.",
        service="the service name",
        namespace="the Kubernetes namespace",
    ),
    _schema(
        "describe_service",
        "Describe a service: owner team, on-call rotation, dependencies, SLOs, runbook.",
        service="the service name",
    ),
    _schema(
        "get_alerts",
        "List the alerts firing now or in a window, with severity and first-fired time.",
        window="a time window",
        severity="int",
    ),
    _schema(
        "http_get",
        "GET an internal HTTP endpoint (health checks, debug pages). Returns status and body.",
        url="the URL",
    ),
]

WORDS = [
    "request",
    "handled",
    "cache",
    "lookup",
    "upstream",
    "downstream",
    "retry",
    "pool",
    "connection",
    "acquired",
    "released",
    "queue",
    "depth",
    "batch",
    "flushed",
    "checkout",
    "cart",
    "inventory",
    "reserve",
    "payment",
    "authorize",
    "order",
    "created",
    "span",
    "ok",
    "slow",
    "timeout",
    "budget",
    "shard",
    "replica",
]


@dataclass(frozen=True)
class Call:
    """One recorded model call: the assistant's message, the tool it called, the result."""

    text: str
    tool: str
    args: dict[str, Any]
    output: str
    uses: tuple[str, ...] = field(default=())  # facts from earlier results it relies on


def _filler(seed: int, lines: int, prefix: str) -> list[str]:
    r = random.Random(seed)
    out = []
    for i in range(lines):
        words = " ".join(r.choice(WORDS) for _ in range(r.randint(6, 12)))
        out.append(f"{prefix} {i:03d} pod=checkout-{r.randint(1, 12)} {words}")
    return out


def logs(seed: int, facts: list[str], lines: int = 70) -> str:
    rows = _filler(seed, lines, "14:0x:xx level=info")
    for i, fact in enumerate(facts):
        rows.insert(3 + 7 * i, f"14:0{i}:31 level=error {fact}")
    return "\n".join(rows)


def series(seed: int, metric: str, peak: int) -> str:
    r = random.Random(seed)
    points = [
        {"t": f"14:{m // 2:02d}:{30 * (m % 2):02d}", "v": r.randint(150, 200) if m < 8 else peak}
        for m in range(60)
    ]
    return json.dumps({"metric": metric, "summary": f"{metric} peak {peak}", "points": points})


def code(seed: int, path: str, facts: dict[int, str], lines: int = 90) -> str:
    r = random.Random(seed)
    out = []
    for n in range(1, lines + 1):
        text = facts.get(n) or "    " + " ".join(r.choice(WORDS) for _ in range(r.randint(3, 8)))
        out.append(f"{n:4d}  {text}")
    return f"# {path}\n" + "\n".join(out)


def rows(seed: int, facts: list[dict[str, Any]], n: int = 40) -> str:
    r = random.Random(seed)
    data: list[dict[str, Any]] = [
        {
            "order": f"o-{r.randint(10000, 99999)}",
            "state": r.choice(["paid", "reserved"]),
            "wait_ms": r.randint(1, 40),
        }
        for _ in range(n)
    ]
    return json.dumps({"rows": facts + data})


CONFIG = "\n".join(
    ["INVENTORY_TIMEOUT_MS=250", "INVENTORY_MAX_ATTEMPTS=3", "PAYMENT_TIMEOUT_MS=900"]
    + [
        f"FLAG_{i:02d}={'on' if i % 3 else 'off'}  # rollout flag {i} of the checkout"
        for i in range(60)
    ]
)
PODS = (
    "\n".join(
        f"checkout-{i:02d}  node-{i % 4}  Running  restarts=0  age=3d  cpu=41%  mem=62%  ready=1/1"
        for i in range(1, 13)
    )
    + "\n12/12 pods ready"
)


def _investigation(i: int, tool: str) -> str:
    """The result of call ``i`` of the long middle part of the investigation."""
    if tool == "search_logs":
        return logs(i, [f"retry storm pod=checkout-{i % 12} attempts=3"])
    if tool == "get_trace":
        spans = [{"op": f"s{k}", "ms": k, "tags": _filler(i * 90 + k, 1, "t")} for k in range(40)]
        return json.dumps({"trace": f"t-b{i:02d}", "spans": spans})
    if tool == "read_file":
        return code(i, f"clients/inventory/mod{i}.py", {})
    if tool == "query_db":
        return rows(i, [])
    return "\n".join(f"clients/m{k}.py:{k}: reserve{i}" for k in range(50))


def _calls() -> list[Call]:
    """The 80 calls, in order (index i is model call i+1)."""
    c: list[Call] = []

    def add(text: str, tool: str, args: dict[str, Any], output: str, *uses: str) -> None:
        c.append(Call(text, tool, args, output, uses))

    add(
        "Starting with the alerts. Calling get_alerts; then get_metrics.",
        "get_alerts",
        {"window": "13:30-14:30"},
        "\n".join(
            [
                "CheckoutLatencyHigh severity=2 first_fired=14:04 service=checkout",
                *_filler(1, 14, "resolved"),
            ]
        ),
    )
    add(
        "CheckoutLatencyHigh fired at 14:04. Calling get_metrics for p99; then list_deploys.",
        "get_metrics",
        {"metric": "http_p99_ms", "service": "checkout"},
        series(2, "http_p99_ms", 870),
        "CheckoutLatencyHigh",
    )
    add(
        "p99 went from ~180 ms to 870 ms at 14:04. Calling list_deploys since 12:00; then "
        "search_logs.",
        "list_deploys",
        {"since": "12:00", "service": "*"},
        "\n".join(
            [
                "d-4821 inventory-client v2.14.0 by ci-bot at 14:02 status=done",
                *_filler(3, 12, "d-47xx"),
            ]
        ),
        "870",
    )
    add(
        "Deploy d-4821 shipped inventory-client v2.14.0 at 14:02, two minutes before the "
        "alert. Calling search_logs for errors; then get_trace.",
        "search_logs",
        {"query": "level:error", "service": "checkout", "window": "14:00-14:30"},
        logs(4, ["InventoryTimeout after 250ms (attempt 3/3) trace=t-9f31"]),
        "d-4821",
    )
    add(
        "Errors are InventoryTimeout after 250ms, attempt 3/3 (trace t-9f31). Calling "
        "get_trace for t-9f31; then search_logs again.",
        "get_trace",
        {"trace_id": "t-9f31"},
        json.dumps(
            {
                "trace": "t-9f31",
                "spans": [
                    {"op": "inventory.reserve", "ms": 742, "attempts": 3},
                    *[
                        {"op": f"span-{i}", "ms": i % 40, "tags": _filler(5 + i, 1, "t")}
                        for i in range(45)
                    ],
                ],
            }
        ),
        "InventoryTimeout",
    )
    # calls 6-13: the agent widens the search (logs and traces of other requests)
    for i in range(6, 14):
        tool = "search_logs" if i % 2 else "get_trace"
        nxt = "get_trace" if i % 2 else "search_logs"
        args = (
            {"query": f"retry attempt:{i % 3 + 1}", "service": "checkout"}
            if i % 2
            else {"trace_id": f"t-a{i:02d}"}
        )
        out = (
            logs(i, [f"retry budget used {i}%"])
            if i % 2
            else json.dumps(
                {
                    "trace": f"t-a{i:02d}",
                    "spans": [{"op": "inventory.reserve", "ms": 700 + i}]
                    + [
                        {"op": f"span-{k}", "ms": k, "tags": _filler(i * 50 + k, 1, "t")}
                        for k in range(40)
                    ],
                }
            )
        )
        add(
            f"inventory.reserve keeps taking ~740 ms across requests (sample {i}). Calling "
            f"{tool}; then {nxt}; read_file next to see the retry policy.",
            tool,
            args,
            out,
            "742" if i == 6 else "InventoryTimeout",
        )
    add(
        "Every slow request waits on inventory.reserve with 3 attempts. Calling read_file "
        "clients/inventory/retry.py at v2.14.0; then grep_code.",
        "read_file",
        {"path": "clients/inventory/retry.py", "revision": "v2.14.0"},
        code(
            14,
            "clients/inventory/retry.py",
            {
                41: "RETRY = Policy(max_attempts=3, timeout_ms=250)  # changed in v2.14.0",
                12: "from .transport import Transport",
            },
        ),
        "inventory.reserve",
    )
    add(
        "retry.py in v2.14.0 sets max_attempts=3 with timeout_ms=250. Calling grep_code for "
        "other users of the policy; then get_config.",
        "grep_code",
        {"pattern": "RETRY|timeout_ms", "path": "clients/"},
        "\n".join(f"clients/mod{i}/x.py:{i * 7}: timeout_ms={100 + i}" for i in range(60)),
        "timeout_ms=250",
    )
    add(
        "Only the inventory client uses that policy. Calling get_config for checkout; then "
        "query_db.",
        "get_config",
        {"service": "checkout", "environment": "prod"},
        CONFIG,
        "max_attempts=3",
    )
    add(
        "Live config agrees: INVENTORY_TIMEOUT_MS=250, 3 attempts. Calling query_db on the "
        "reservations table; then describe_service.",
        "query_db",
        {"sql": "SELECT * FROM lock_waits WHERE tbl='reservations'", "database": "inventory"},
        rows(17, [{"table": "reservations", "lock_wait_s": 0.41}]),
        "INVENTORY_TIMEOUT_MS=250",
    )
    # calls 18-21: database digging
    for i in range(18, 22):
        add(
            f"reservations shows lock waits of 0.41 s (query {i}). Calling query_db; then "
            "describe_service for the owner.",
            "query_db",
            {"sql": f"SELECT * FROM slow_queries WHERE minute={i}", "database": "inventory"},
            rows(i, [{"q": f"reserve-{i}", "ms": 400 + i}]),
            "0.41",
        )
    add(
        "The database is slow but not the first cause. Calling describe_service "
        "inventory; then search_logs.",
        "describe_service",
        {"service": "inventory"},
        "owner: team-fulfilment\noncall: fulfilment-primary\n"
        "runbook: https://runbooks.internal/inventory/latency\n"
        + "\n".join(_filler(22, 20, "dependency")),
        "0.41",
    )
    # calls 23-61: long investigation of the retry storm (logs, traces, code, db, config)
    cycle = ["search_logs", "get_trace", "read_file", "query_db", "grep_code", "search_logs"]
    for i in range(23, 62):
        tool = cycle[i % len(cycle)]
        nxt = cycle[(i + 1) % len(cycle)]
        args: dict[str, Any] = {
            "search_logs": {"query": f"pod:checkout-{i % 12} retry", "service": "checkout"},
            "get_trace": {"trace_id": f"t-b{i:02d}"},
            "read_file": {"path": f"clients/inventory/mod{i}.py", "revision": "v2.14.0"},
            "query_db": {"sql": f"SELECT * FROM waits WHERE pod={i % 12}", "database": "inventory"},
            "grep_code": {"pattern": f"reserve{i}", "path": "clients/"},
        }[tool]
        out = _investigation(i, tool)
        uses = (
            ("d-4821", "timeout_ms=250") if i % 10 == 0 else ("team-fulfilment",) if i == 33 else ()
        )
        add(
            f"Retries multiply the 250 ms timeout three times (step {i}); owner is "
            f"team-fulfilment. Calling {tool}; then {nxt}.",
            tool,
            args,
            out,
            *uses,
        )
    add(
        "To point at the exact change: calling grep_code for the policy line; then list_pods.",
        "grep_code",
        {"pattern": "Policy\\(max_attempts", "path": "clients/"},
        "clients/inventory/retry.py: RETRY = Policy(...)",
        "41  RETRY = Policy(max_attempts=3",
    )  # call 62: recall
    for i in range(63, 67):  # pods, several times, identical output
        add(
            f"Checking for restarts (look {i}). Calling list_pods; then get_config.",
            "list_pods",
            {"service": "checkout", "namespace": "shop"},
            PODS,
        )
    for i in range(67, 70):  # config again, identical output
        add(
            f"Pods are healthy (12/12 pods ready). Re-reading config (look {i}) with "
            "get_config; then get_metrics.",
            "get_config",
            {"service": "checkout", "environment": "prod"},
            CONFIG,
            "12/12 pods ready",
        )
    add(
        "Config unchanged. Checking the health page.",
        "http_get",  # call 70: unannounced tool
        {"url": "http://inventory.shop/healthz"},
        '{"status": 200, "body": "ok, queue_depth=812 (high)"}' + " " * 400,
        "INVENTORY_TIMEOUT_MS=250",
    )
    for i in range(71, 76):
        add(
            f"Inventory queue depth 812 is high (sample {i}). Calling get_metrics; then "
            "search_logs.",
            "get_metrics",
            {"metric": f"queue_depth_{i}", "service": "inventory"},
            series(i, f"queue_depth_{i}", 812),
            "queue_depth=812",
        )
    add(
        "Before paging the owner, the runbook: calling search_logs; then list_deploys.",
        "search_logs",
        {"query": "runbook", "service": "inventory"},
        logs(76, ["see runbook"]),
        "https://runbooks.internal/inventory/latency",
    )  # 76: recall
    for i in range(77, 80):
        add(
            f"Confirming the deploy timeline (check {i}). Calling list_deploys; then get_alerts.",
            "list_deploys",
            {"since": "14:00", "service": "inventory-client"},
            "\n".join(
                [f"d-4821 inventory-client v2.14.0 at 14:02 (check {i})", *_filler(i, 10, "d")]
            ),
            "d-4821",
        )
    add(
        "Cause: deploy d-4821 (inventory-client v2.14.0) set RETRY max_attempts=3, "
        "timeout_ms=250; retries triple the wait. Fix: revert d-4821 or raise the timeout. "
        "Owner: team-fulfilment. Calling get_alerts to confirm.",
        "get_alerts",
        {"window": "14:00-15:00"},
        "CheckoutLatencyHigh still firing",
        "d-4821",
        "timeout_ms=250",
        "team-fulfilment",
    )
    assert len(c) == 80, len(c)
    return c


CALLS = _calls()
