"""The request and response bodies of the API, as typed models: FastAPI checks requests
against them and writes ``/openapi.json`` from them (what clients and fuzzers read).

Request bodies forbid unknown fields: a ``by`` in a decision is refused (422), because the
identity recorded for a decision is the token's, never the request's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JsonObject = dict[str, Any]


class Strict(BaseModel):
    """A request body: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"type", "message"}}``."""

    error: ErrorDetail


class Me(BaseModel):
    """The caller: its token's name, role and tenant (None: every tenant)."""

    name: str
    role: str
    tenant: str | None
    csrf_token: str | None = Field(None, description="the session's CSRF token (cookie only)")


class Login(Strict):
    token: str = Field(max_length=200, description="an API token (tether token create)")


class RunSummary(BaseModel):
    """One run of the list: its row (the list never folds a log)."""

    id: str
    agent: str
    version: str | None
    status: str
    queue: str | None
    session: str | None
    tenant: str | None
    parent_id: str | None
    waiting_for: str | None
    created_at: float
    updated_at: float


class RunList(BaseModel):
    runs: list[RunSummary]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")


class RunPage(BaseModel):
    """A run: its row and its folded state (position, steps with their inputs' digests
    and outputs, decisions with rationale, retry and failure context, vars, usage,
    lineage). Steps come a page at a time: ``steps_after``/``steps_limit``."""

    run: RunSummary
    state: JsonObject
    steps: list[JsonObject]
    steps_total: int
    lineage: JsonObject


class EventOut(BaseModel):
    seq: int
    type: str
    at: float
    actor: str | None
    data: JsonObject


class EventPage(BaseModel):
    events: list[EventOut]
    next_after: int | None = Field(description="pass as `after` for the next page")


class StateOut(BaseModel):
    run_id: str
    seq: int
    state: JsonObject


class DiffOut(BaseModel):
    a: str
    b: str
    same: bool
    added: list[JsonObject]
    removed: list[JsonObject]
    changed: list[JsonObject]


class ForkIn(Strict):
    step: int | str | None = Field(None, description="fork after (or before) this step")
    at: int | None = Field(None, ge=0, description="or at this seq of the log")
    when: Literal["before", "after"] = "after"
    input: JsonObject | None = None
    vars: JsonObject | None = None


class Forked(BaseModel):
    id: str
    parent_id: str


class DecisionIn(Strict):
    decision: Literal["approve", "deny"]
    reason: str | None = Field(None, max_length=10_000)


class ResolveIn(Strict):
    happened: bool
    result: Any = Field(None, description="the call's result when it happened")


class SignalIn(Strict):
    payload: Any = None


class CancelIn(Strict):
    compensate: bool = False
    reason: str | None = Field(None, max_length=10_000)


class RevertIn(Strict):
    """Revert the call at position ``step``; ``happened`` settles an undo a crash left in
    doubt (True: it ran; False: call it again)."""

    step: int = Field(ge=1)
    reason: str | None = Field(None, max_length=10_000)
    happened: bool | None = None


class Reverted(BaseModel):
    """A revert done: the run, the reverted position and tool, the undo's idempotency key,
    who reverted it, and whether it finished a revert a crash left pending."""

    id: str
    step: int
    tool: str
    key: str
    by: str
    resumed: bool


class CostTotal(BaseModel):
    """Model usage summed per agent or per session (``key``: its name or id)."""

    key: str | None
    runs: int
    calls: int
    cost: float
    input_tokens: int
    output_tokens: int


class BudgetIn(Strict):
    """What to add to a run's limits: ``{"steps": 10, "cost": 1.5}`` (steps, model_calls,
    tokens, cost, duration in seconds or "10m")."""

    add: dict[str, int | float | str] = Field(min_length=1, max_length=5)
    reason: str | None = Field(None, max_length=10_000)


class Done(BaseModel):
    """An act's outcome: the run's status after it."""

    id: str
    status: str
    woke: bool | None = None


class InboxItem(BaseModel):
    """A run waiting for a person, and exactly what is to be decided: ``kind`` approval
    (``name``, ``payload``: what is approved, ``approvers``: None for anyone, ``until``),
    doubt (``name``: the tool, ``payload``: its input and why, ``key``) or budget
    (``name``: the limit reached; ``payload``: the limit, its max and the usage; raise it
    with POST /api/runs/{id}/budget). ``problem``:
    why the run's state could not be read (payload then None)."""

    run_id: str
    agent: str
    tenant: str | None
    kind: str
    name: str | None
    position: int | None
    since: float | None
    payload: Any
    approvers: list[str] | None
    key: str | None
    until: float | None
    problem: str | None


class Inbox(BaseModel):
    items: list[InboxItem]
    next_cursor: str | None


class QueueOut(BaseModel):
    """A queue: how many runs wait in it, and the workers that claim from it."""

    name: str
    queued: int
    queued_at_least: bool = Field(description="the count stopped at its bound: at least")
    workers: list[str]


class WorkerOut(BaseModel):
    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    heartbeat_age_s: float
    stopping: bool
    runs: list[str]


class ScheduleOut(BaseModel):
    """A schedule: its agent, timing (``when``: ``cron:<line>`` in UTC or
    ``every:<seconds>``), queue, whether it is paused, its next tick and the last fired."""

    name: str
    agent: str
    when: str
    queue: str
    catch_up: bool
    paused: bool
    next_at: float
    last_tick: float | None
    created_at: float
    updated_at: float


class ScheduleDone(BaseModel):
    """A schedule act's outcome: ``changed`` False when it was so already (paused, not
    paused); ``schedule``: the schedule after it (None once deleted)."""

    name: str
    changed: bool
    schedule: ScheduleOut | None


class BoardOut(BaseModel):
    """A board: its tenant (None: no tenant's), name, keys holding a value, last change."""

    tenant: str | None
    board: str
    keys: int
    updated_at: float


class BoardEntryOut(BaseModel):
    """A key at one version: its value (None when ``deleted``), and who made that
    version: a run and its step position, and ``by`` (a token's or a writer's name)."""

    key: str
    version: int
    value: Any
    deleted: bool
    run_id: str | None
    position: int | None
    by: str | None
    at: float | None


class BoardPage(BaseModel):
    """A board's keys holding a value, by key (now, or ``at`` a time)."""

    tenant: str | None
    board: str
    at: float | None
    keys: list[BoardEntryOut]


class HistoryPage(BaseModel):
    changes: list[BoardEntryOut]
    next_after: int | None = Field(description="pass as `after` for the next page")


class BoardSetIn(Strict):
    """The new value of a key; with ``expected_version``, a compare-and-set: written only
    if the key is at that version (0: never written), else 409 with its version."""

    value: Any
    expected_version: int | None = Field(None, ge=0, le=2**62, strict=True)
