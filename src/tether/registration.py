"""Registration (a mixin of :class:`tether.App`): the agents and tools an App executes,
and the modules a run's record may make it import (see :mod:`tether.engine.registry`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

from tether.engine.contracts import Rule
from tether.engine.effects import ToolDef
from tether.engine.registry import AgentDef, Registry, Version, agent, tool
from tether.engine.retry import Retry
from tether.model.budgets import Limits
from tether.model.workspace import Workspace

F = TypeVar("F", bound=Callable[..., Any])


class Registration:
    """The App's methods of this module (a mixin of :class:`tether.App`)."""

    _registry: Registry

    @property
    def code(self) -> frozenset[str]:
        """The modules a run's record may make this app import (see :meth:`allow_code`)."""
        return self._registry.code

    @overload
    def agent(self, fn: F) -> F: ...

    @overload
    def agent(
        self,
        *,
        name: str | None = None,
        version: Version = None,
        limits: Limits | None = None,
        workspace: Workspace | str | os.PathLike[str] | None = None,
    ) -> Callable[[F], F]: ...

    def agent(
        self,
        fn: F | None = None,
        *,
        name: str | None = None,
        version: Version = None,
        limits: Limits | None = None,
        workspace: Workspace | str | os.PathLike[str] | None = None,
    ) -> F | Callable[[F], F]:
        """Register an agent (its first parameter is the ``run``); ``version``: declared
        (``"2"``), or derived from its code (``tether.source_version``): each run resumes
        under its own version's code (docs/deploys.md); ``limits``: see Limits;
        ``workspace``: the directory it works in, checkpointed (docs/workspace.md)."""

        def register(f: F) -> F:
            agent(name=name, version=version, limits=limits, workspace=workspace)(f)
            d: AgentDef = f.__tether_agent__  # type: ignore[attr-defined]
            self._registry.add(d)
            return f

        return register(fn) if fn is not None else register

    def agents(self) -> dict[str, AgentDef]:
        """The registered agents by name."""
        return dict(self._registry.agents)

    def tool(
        self,
        fn: F | None = None,
        *,
        risk: str = "write",
        compensate: Callable[..., Any] | None = None,
        on_doubt: str | None = None,
        retry: Retry | None = None,
        name: str | None = None,
        secret: Sequence[str] = (),
        contract: bool | Sequence[Rule] | None = None,
    ) -> F | Callable[[F], F]:
        """Register a tool: ``risk`` is ``read``, ``write`` (default) or ``irreversible``.

        ``compensate(result, *args, **kwargs)`` undoes a completed call when the run
        fails or is cancelled with compensation; ``on_doubt`` is ``retry`` (call again
        with the same idempotency key) or ``ask`` (pause for a human) after a crash or
        a timeout that hid whether the call happened. Left out, it is ``retry`` for a
        ``write`` tool that takes ``idempotency_key`` and ``ask`` otherwise (see
        :mod:`tether.engine.effects` and docs/guarantees.md). ``secret``: parameters
        whose values are stored as secrets (``tether.Secret``), the function receiving
        the plain values (see docs/secrets.md). ``contract``: True checks each call's
        arguments and result against the annotations; a list of ``tether.Rule`` adds rules
        over the arguments (see docs/contracts.md).
        """

        def register(f: F) -> F:
            declared = tool(
                risk=risk,
                compensate=compensate,
                on_doubt=on_doubt,
                retry=retry,
                name=name,
                secret=secret,
                contract=contract,
            )(f)
            d: ToolDef = declared.__tether_tool__  # type: ignore[attr-defined]
            self._registry.add(d)
            return declared

        return register(fn) if fn is not None else register

    def tools(self) -> dict[str, ToolDef]:
        """The registered tools by name."""
        return dict(self._registry.tools)

    def allow_code(self, *modules: str) -> None:
        """Allow importing ``modules`` (and their submodules) to find the agents and tools
        of runs this app did not register (see :mod:`tether.engine.registry`)."""
        self._registry.allow(modules)
