"""Decisions and control from outside a run (a mixin of :class:`tether.App`): approve,
deny, resolve a call in doubt, signal, cancel, revert one effect, and the effects and
audit records they leave (see :mod:`tether.services.control`, :mod:`tether.engine.revert`)."""

from __future__ import annotations

from typing import Any

from tether.engine.executor import RunHandle
from tether.engine.revert import Reverted, Reverter
from tether.services import control
from tether.services.control import Control
from tether.services.reader import Reader
from tether.store import AuditRecord, Effect


class Decisions:
    """The App's methods of this module (a mixin of :class:`tether.App`)."""

    _control: Control
    _reader: Reader
    _reverter: Reverter

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

    def revert(
        self,
        run_id: str,
        *,
        step: int,
        by: str,
        reason: str | None = None,
        happened: bool | None = None,
    ) -> Reverted:
        """Undo the one completed write-tool call at position ``step`` with its tool's
        compensation, journaled (intent, own idempotency key, who: ``by``), leaving the
        rest of the run as it is; a revert a crash interrupted is finished by calling this
        again (``happened``: settles one whose undo may have run, see
        :mod:`tether.engine.revert`). Refused with RevertRefused, nothing written, for a
        step that is not a completed write call, a tool without compensation, a call
        already reverted or compensated, a fork's copied call, or a run executing now."""
        return self._reverter.revert(run_id, step, by=by, reason=reason, happened=happened)

    def effect(self, key: str) -> Effect | None:
        """The effects-table row of an idempotency key (None if never called)."""
        return self._reader.effect(key)

    def audit(self, run_id: str) -> list[AuditRecord]:
        """The run's audit records (refused decisions and the like)."""
        return self._reader.audit(run_id)
