"""The boards' routes: list them, read a board's keys with their versions (now or at a
time), a key's every change (who: a run and its step, or a name; when), and set a key,
with a compare-and-set on its version (see :mod:`tether.context.boards`).

A tenant's token sees its tenant's boards alone; an identity of every tenant names the
tenant with ``tenant`` (left out: the boards of no tenant). Reading needs the viewer
role, setting the operator's (as ``app.scoped(identity).board``); a change is recorded
under the token's name, and in the audit log (:mod:`tether.server.access`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from tether.errors import NotFound
from tether.server import schemas, views
from tether.server.deps import Caller

router = APIRouter(
    prefix="/api/boards",
    tags=["boards"],
    responses={code: {"model": schemas.ErrorBody} for code in (401, 403, 404, 409, 503)},
)

Name = Annotated[str, Path(min_length=1, max_length=200)]
Tenant = Annotated[str | None, Query(min_length=1, max_length=200)]
At = Annotated[float | None, Query(ge=0, le=1e11, description="a time: epoch seconds")]


def _tenant(tenant: str) -> str | None:
    return tenant or None  # the store's '' is "no tenant"


@router.get("", response_model=list[schemas.BoardOut])
def boards(caller: Caller, tenant: Tenant = None) -> list[schemas.BoardOut]:
    """The boards the caller sees (``tenant``: of that tenant alone), by tenant and name,
    each with its keys holding a value and its last change."""
    return [
        schemas.BoardOut(
            tenant=_tenant(b.tenant), board=b.board, keys=b.keys, updated_at=b.updated_at
        )
        for b in caller.boards(tenant)
    ]


@router.get("/{name}", response_model=schemas.BoardPage)
def board(caller: Caller, name: Name, tenant: Tenant = None, at: At = None) -> schemas.BoardPage:
    """Each key holding a value, with its version and who wrote it; ``at``: as the board
    was then. 404 for a board with no change."""
    found = caller.board(name, tenant)
    entries = found.items(at=at)
    return schemas.BoardPage(
        tenant=found.tenant,
        board=found.name,
        at=at,
        keys=[views.board_entry(entries[k]) for k in sorted(entries)],
    )


@router.get("/{name}/keys/{key}", response_model=schemas.BoardEntryOut)
def key(
    caller: Caller, name: Name, key: Name, tenant: Tenant = None, at: At = None
) -> schemas.BoardEntryOut:
    """The key's value and version (now, or ``at`` a time); a deleted key answers with
    ``deleted`` and its version. 404 for a key never written (by then)."""
    entry = caller.board(name, tenant).get(key, at=at)
    if entry.version == 0:
        raise NotFound(
            f"board {name!r} has no key {key!r}"
            + ("" if at is None else " at that time")
            + ": set it with expected_version 0 to create it"
        )
    return views.board_entry(entry)


@router.get("/{name}/keys/{key}/history", response_model=schemas.HistoryPage)
def history(
    caller: Caller,
    name: Name,
    key: Name,
    tenant: Tenant = None,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> schemas.HistoryPage:
    """The key's changes after version ``after``, oldest first, at most ``limit``: each
    version's value, the run and step (or the name) that made it, and when."""
    found = caller.board(name, tenant).history(key, after=after, limit=limit)
    last = found[-1].version if len(found) == limit else None
    return schemas.HistoryPage(changes=[views.board_entry(e) for e in found], next_after=last)


@router.put("/{name}/keys/{key}", response_model=schemas.BoardEntryOut)
def set_key(
    caller: Caller, name: Name, key: Name, body: schemas.BoardSetIn, tenant: Tenant = None
) -> schemas.BoardEntryOut:
    """Set the key to ``value`` (creating the board); with ``expected_version`` only if the
    key is at it, else 409 with the key's ``version`` in the error. Operator."""
    entry = caller.set_board_key(name, tenant, key, body.value, body.expected_version)
    return views.board_entry(entry)
