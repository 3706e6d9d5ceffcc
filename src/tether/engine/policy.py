"""The tool approval policy: which tool calls need a human's approval before they run."""

from __future__ import annotations

from tether.model import inputs
from tether.model.durations import parse_duration


class Policy:
    """When tool calls need a human: tools at or above ``approve_at`` risk get an
    automatic ``run.approve("approve:<tool>")`` gate before they run."""

    LEVELS = ("read", "write", "irreversible")

    def __init__(
        self,
        approve_at: str | None = None,
        approvers: list[str] | None = None,
        timeout: str | float | None = None,
    ) -> None:
        if approve_at is not None and approve_at not in self.LEVELS:
            raise ValueError(f"approve_at must be one of {self.LEVELS} or None, not {approve_at!r}")
        parse_duration(timeout, what="Policy.timeout")  # refused here, not at the first gate
        for a in approvers or ():
            inputs.name(a, "Policy.approvers: an approver")
        self.approve_at = approve_at
        self.approvers = approvers
        self.timeout = timeout

    def requires_approval(self, risk: str) -> bool:
        if self.approve_at is None:
            return False
        return self.LEVELS.index(risk) >= self.LEVELS.index(self.approve_at)
