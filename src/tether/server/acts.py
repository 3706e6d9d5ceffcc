"""The routes that act on a run: fork, decide an approval, resolve a call in doubt, signal,
cancel, revert one effect, retry, raise a budget; and the browser session's login and logout.

Each acts as the caller's identity (its token's name is the recorded ``by``/``sender``),
after :class:`~tether.server.access.Access` checked the tenant and the role. The server
never executes a run: a fork is queued, a retry goes back to the run's queue, and a
decided run is continued by a worker (or ``tether resume``). A revert is the one act that
calls code: the undo of one call, here (its tool must be known to the served App).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from tether.server import schemas
from tether.server.auth import COOKIE
from tether.server.deps import Caller, ServerOf
from tether.services.control import NO_RESULT

router = APIRouter(
    prefix="/api",
    responses={code: {"model": schemas.ErrorBody} for code in (401, 403, 404, 409, 429, 503)},
)

Name = Annotated[str, Path(min_length=1, max_length=200)]


def _done(caller: Caller, run_id: str, woke: bool | None = None) -> schemas.Done:
    return schemas.Done(id=run_id, status=caller.app.record(run_id).status, woke=woke)


@router.post("/runs/{run_id}/fork", response_model=schemas.Forked, status_code=201)
def fork(caller: Caller, run_id: str, body: schemas.ForkIn) -> schemas.Forked:
    """A new queued run branching off this one after ``step`` (or at seq ``at``; its head
    when neither), with new ``input`` and edited ``vars``; completed effects are reused.
    Operator."""
    step = int(body.step) if isinstance(body.step, str) and body.step.isdigit() else body.step
    new = caller.fork(
        run_id, step=step, at=body.at, when=body.when, input=body.input, vars=body.vars
    )
    return schemas.Forked(id=new, parent_id=run_id)


@router.post("/runs/{run_id}/approvals/{name}", response_model=schemas.Done)
def decide(caller: Caller, run_id: str, name: Name, body: schemas.DecisionIn) -> schemas.Done:
    """Approve or deny the run's request ``name`` as the caller (approver). A ``by``
    field is refused: the decision is the token's."""
    caller.decide(run_id, name, approve=body.decision == "approve", reason=body.reason)
    return _done(caller, run_id)


@router.post("/runs/{run_id}/resolve", response_model=schemas.Done)
def resolve(caller: Caller, run_id: str, body: schemas.ResolveIn) -> schemas.Done:
    """Settle the run's tool call in doubt: it ``happened`` (with its ``result``) or not
    (it is called again). Approver."""
    result = body.result if "result" in body.model_fields_set else NO_RESULT
    caller.resolve(run_id, happened=body.happened, result=result)
    return _done(caller, run_id)


@router.post("/runs/{run_id}/signals/{name}", response_model=schemas.Done)
def signal(caller: Caller, run_id: str, name: Name, body: schemas.SignalIn) -> schemas.Done:
    """Send the signal ``name`` with ``payload``, from the caller. Approver."""
    woke = caller.signal(run_id, name, body.payload)
    return _done(caller, run_id, woke)


@router.post("/runs/{run_id}/cancel", response_model=schemas.Done)
def cancel(caller: Caller, run_id: str, body: schemas.CancelIn) -> schemas.Done:
    """Cancel the run (``compensate``: undo its completed write tools first). Operator."""
    caller.cancel(run_id, compensate=body.compensate, reason=body.reason)
    return _done(caller, run_id)


@router.post("/runs/{run_id}/revert", response_model=schemas.Reverted)
def revert(caller: Caller, run_id: str, body: schemas.RevertIn) -> schemas.Reverted:
    """Undo the one completed write-tool call at position ``step`` with its compensation,
    as the caller; the rest of the run stays as it is (409 when refused, nothing written).
    Operator."""
    r = caller.revert(run_id, step=body.step, reason=body.reason, happened=body.happened)
    return schemas.Reverted(
        id=r.run_id, step=r.position, tool=r.tool, key=r.key, by=r.by, resumed=r.resumed
    )


@router.post("/runs/{run_id}/retry", response_model=schemas.Done)
def retry(caller: Caller, run_id: str) -> schemas.Done:
    """Put a failed (or blocked) run back in its queue, where a worker retries it from
    its failed step. Operator."""
    caller.retry(run_id)
    return _done(caller, run_id)


@router.post("/runs/{run_id}/budget", response_model=schemas.Done)
def raise_budget(caller: Caller, run_id: str, body: schemas.BudgetIn) -> schemas.Done:
    """Raise the limits of a run waiting on its budget by ``add``; a worker of its queue
    (or ``tether resume``) goes on. Operator."""
    caller.raise_budget(run_id, add=dict(body.add), reason=body.reason)
    return _done(caller, run_id)


@router.post("/login", response_model=schemas.Me, responses={401: {"model": schemas.ErrorBody}})
def login(s: ServerOf, body: schemas.Login, request: Request, response: Response) -> schemas.Me:
    """A browser session from a token: an HttpOnly, SameSite=Strict cookie, and the CSRF
    token every unsafe request with the cookie sends as ``X-CSRF-Token``."""
    who, session = s.auth.login(body.token)
    response.set_cookie(
        COOKIE,
        session.cookie,
        max_age=int(s.auth.sessions.ttl),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return schemas.Me(
        name=who.name, role=who.role.label, tenant=who.tenant, csrf_token=session.csrf
    )


@router.post("/logout", status_code=204)
def logout(response: Response) -> Response:
    """End the browser session (clears its cookie)."""
    response.status_code = 204
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
