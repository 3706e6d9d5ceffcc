"""Decisions and control from outside a run (a mixin of :class:`tether.App`): approve,
deny, resolve a call in doubt, signal, cancel, and the effects and audit records they
leave (see :mod:`tether.services.control`)."""

from __future__ import annotations

from typing import Any

from tether.engine.executor import RunHandle
from tether.services import control
from tether.services.control import Control
from tether.services.reader import Reader
from tether.store import AuditRecord, Effect


class Decisions:
    """The App's methods of this module (a mixin of :class:`tether.App`)."""

    _control: Control
    _reader: Reader

    def approve(self, run_id: str, name: str, *, by: str, reason: str | None = None) -> None:
        """Approve a waiting run's request ``name``; the run becomes resumable.

        Refused (DecisionRefused, recorded in the audit log) when ``by`` is not an
        approver, the request was already decided, or the run is not waiting for it.
        """
        self._control.approve(run_id, name, approved=True, by=by, reason=reason)

    def deny(self, run_id: str, name: str, *, by: str, reason: str | None = None) -> None:
        """Deny a waiting run's request ``name``: ``run.approve`` raises ApprovalDenied."""
        self._control.approve(run_id, name, approved=False, by=by, reason=reason)

    def resolve(
        self, run_id: str, *, happened: bool, by: str, result: Any = control.NO_RESULT
    ) -> None:
        """Settle a tool call in doubt: it ``happened`` (with its ``result``) or not (retry).

        ``happened=True`` needs the call's ``result`` (``None`` included) unless the tool
        is registered here and annotated ``-> None``; refused (DecisionRefused, audited)
        without it, and for ``by`` naming an approver group rather than a person."""
        self._control.settle(run_id, happened=happened, by=by, result=result)

    def signal(
        self, run_id: str, name: str, payload: Any = None, *, sender: str | None = None
    ) -> bool:
        """Send a signal; kept until ``run.wait(name)`` takes it. Returns whether it woke
        the run. A finished run refuses signals (InvalidState)."""
        return self._control.send(run_id, name, payload, sender=sender)

    def cancel(
        self,
        run_id: str,
        *,
        compensate: bool = False,
        by: str | None = None,
        reason: str | None = None,
    ) -> RunHandle:
        """Cancel a run that is not executing (queued, waiting, or crashed); with
        ``compensate=True`` first undo its completed write tools, newest first."""
        return self._control.cancel(run_id, compensate=compensate, by=by, reason=reason)

    def effect(self, key: str) -> Effect | None:
        """The effects-table row of an idempotency key (None if never called)."""
        return self._reader.effect(key)

    def audit(self, run_id: str) -> list[AuditRecord]:
        """The run's audit records (refused decisions and the like)."""
        return self._reader.audit(run_id)
