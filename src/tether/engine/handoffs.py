"""Handoffs: ``run.handoff`` gives a new run of another agent the conversation and the
task variables it names, linked to the giver and recorded in both logs (issue 31).

The target is a child run (:mod:`tether.engine.children`): its id is ``{giver}~{pos}``,
its enqueue is idempotent on that id, and its ``run.created`` names its ``caller``. That
event also carries ``handoff``: ``{"from": giver, "pos": position, "vars": {name:
value}}`` and the conversation handed, either ``{"session": id, "upto": seq}`` (the
target runs in that session, which it reads as ``run.session``) or ``{"messages":
[...]}`` (a list of messages, copied). So the target's log begins with what it was
handed; its fold and its journal start with those variables set, and ``run.handed``
returns the whole of it. The values go through the codec as any event's: a Secret is
stored as its marker, credentials are redacted.

The giver records a ``handoff`` step (its output: the target's id, agent, the names of
the variables and what of the conversation it handed); a replay returns the recorded
target and starts nothing, and a giver that crashed after the target's creation and
before that record finds the target by its id. With ``wait`` (the default), a ``join``
step follows: the giver waits for the target, holding no process, and returns its
output (or raises ChildFailed), so whoever waits for the giver gets the final answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.context.conversation import Session, load_session
from tether.engine import children
from tether.errors import EncodeError, InvalidInput, TetherError
from tether.model import codec, inputs

if TYPE_CHECKING:
    from tether.engine.calls import Slot
    from tether.engine.children import Spawner
    from tether.engine.journal import Journal
    from tether.engine.registry import AgentDef


@dataclass(frozen=True, slots=True)
class Handed:
    """What a run was handed (``run.handed``): the giver's run id (``by``) and the position
    of its handoff (``pos``), the variables (also in ``run.vars``), the messages (a list
    handed, or the session's prompt view as it stood at the handoff) and the session id."""

    by: str
    pos: int
    vars: Mapping[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    session: str | None = None


def handoff_core(
    j: Journal,
    agent: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    names: Iterable[str] | str,
    conversation: Any,
    queue: str,
    wait: bool,
    tenant: Callable[[], str | None],
    session: Callable[[], Session | None],
) -> Any:
    """Hand off to a new run of ``agent`` (position taken now); with ``wait``, then join
    it (a second position) and return its output, else return its id."""
    spawner = j.spawner
    if spawner is None:
        raise TetherError(f"run {j.run_id}: run.handoff needs a run executed by a tether App")
    d = spawner.resolve(agent)
    inputs.name(queue, "queue")
    keys = _names(j.run_id, d.name, names)
    if not isinstance(wait, bool):
        raise InvalidInput(f"run {j.run_id}: run.handoff's wait is True or False, not {wait!r}")
    slot = j.slot("handoff", d.name)

    def give() -> str:
        return _give(
            j, spawner, slot, d, (args, kwargs), keys, conversation, queue, tenant, session
        )

    rid = str(j.trace.gate(slot, give)) if j.trace is not None else give()
    if not wait:
        return rid
    return children.join_core(j, rid, "handoff")


def _names(run_id: str, agent: str, names: Iterable[str] | str) -> list[str]:
    one = isinstance(names, str | bytes | dict) or not hasattr(names, "__iter__")
    keys: list[Any] = [names] if one else list(names)  # not a name (below): refused
    bad = [k for k in keys if not isinstance(k, str) or not k]
    if bad:
        raise InvalidInput(
            f"run {run_id}: run.handoff to {agent!r}: vars= takes task variable names "
            f"(non-empty str), not {bad[0]!r}"
        )
    return list(dict.fromkeys(keys))


def _give(
    j: Journal,
    spawner: Spawner,
    slot: Slot,
    d: AgentDef,
    call: tuple[tuple[Any, ...], dict[str, Any]],
    keys: list[str],
    conversation: Any,
    queue: str,
    tenant: Callable[[], str | None],
    session: Callable[[], Session | None],
) -> str:
    if slot.done:
        assert slot.recorded is not None
        return str(slot.recorded.output["run"])
    began = j.clock.now()
    where = f"run {j.run_id}: run.handoff to {d.name!r} (position {slot.pos})"
    owner = tenant()
    handed: dict[str, Any] = {"from": j.run_id, "pos": slot.pos, "vars": _values(j, keys, where)}
    handed |= _conversation(conversation, session, owner, where)
    caller = {"run": j.run_id, "pos": slot.pos}
    rid = spawner.start(
        d,
        *call,
        queue,
        children.child_id(j.run_id, slot.pos),
        caller,
        owner,
        session=handed.get("session"),
        handoff=handed,
    )
    output: dict[str, Any] = {"run": rid, "agent": d.name, "vars": keys}
    if "session" in handed:
        output |= {"session": handed["session"], "upto": handed["upto"]}
    elif "messages" in handed:
        output["messages"] = len(handed["messages"])
    j.record_success(slot, 1, None, output, j.clock.now() - began)
    return rid


def _values(j: Journal, keys: list[str], where: str) -> dict[str, Any]:
    missing = [k for k in keys if k not in j.vars]
    if missing:
        have = ", ".join(sorted(j.vars)) or "none"
        raise InvalidInput(
            f"{where}: task variable {missing[0]!r} is not set (set: {have}); set it first "
            f"(run.vars[{missing[0]!r}] = ...) or leave it out of vars="
        )
    values = {k: j.vars[k] for k in keys}
    for k, v in values.items():
        _storable(v, f"{where}: task variable {k!r}", "a value")
    return values


def _storable(value: Any, what: str, instead: str) -> None:
    """Raise EncodeError, naming ``what`` and the path, when ``value`` cannot be stored."""
    try:
        codec.encode(value, what=what)
    except EncodeError as e:
        raise EncodeError(
            f"{what} cannot be handed (stored): {e.type_name} at {e.path}; hand {instead} "
            f"tether can store",
            path=e.path,
            type_name=e.type_name,
        ) from None


def _conversation(
    conversation: Any, session: Callable[[], Session | None], owner: str | None, where: str
) -> dict[str, Any]:
    """What of a conversation is handed: ``{}``, ``{"session", "upto"}`` or ``{"messages"}``."""
    if conversation is None or conversation is False:
        return {}
    if conversation is True:
        found = session()
        if found is None:
            raise InvalidInput(
                f"{where}: conversation=True hands the session this run belongs to, and it "
                f"belongs to none; start it with app.run_in/app.start_in, or hand a Session "
                f"or a list of messages"
            )
        conversation = found
    if isinstance(conversation, Session):
        if conversation.owner != owner:
            raise InvalidInput(
                f"{where}: session {conversation.id!r} belongs to owner {conversation.owner!r}, "
                f"and this run to tenant {owner!r}: a run hands only its own tenant's sessions"
            )
        base, window = conversation.window()
        upto = window[-1].seq if window else (base.upto if base is not None else 0)
        return {"session": conversation.id, "upto": upto}
    if isinstance(conversation, list | tuple) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and "content" in m
        for m in conversation
    ):
        messages = [dict(m) for m in conversation]
        _storable(messages, f"{where}: the conversation", "messages")
        return {"messages": messages}
    raise InvalidInput(
        f"{where}: conversation= takes True (this run's session), a Session, or a list of "
        f'messages ({{"role": ..., "content": ...}} dicts), not {type(conversation).__name__}'
    )


def handed(j: Journal) -> Handed | None:
    """What the run of journal ``j`` was handed, or None (it was not handed off to)."""
    h = j.handed
    if h is None:
        return None
    messages = [dict(m) for m in h.get("messages") or ()]
    sid = h.get("session")
    if sid is not None:
        base, window = load_session(j.store, j.clock, sid).window(int(h.get("upto") or 0))
        messages = ([base.as_prompt()] if base is not None else []) + [
            m.as_prompt() for m in window
        ]
    return Handed(str(h["from"]), int(h["pos"]), dict(h.get("vars") or {}), messages, sid)


def handoffs_of(steps: Iterable[Any]) -> list[dict[str, Any]]:
    """The handoffs a run made: each ``handoff`` step's record, with its position."""
    return [
        {"pos": s.position, **s.output}
        for s in steps
        if s.kind == "handoff" and isinstance(s.output, Mapping)
    ]
