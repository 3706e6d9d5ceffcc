"""``tether serve``: the HTTP API over an App, as an ASGI application.

:func:`create_app` builds it (FastAPI on Starlette); ``tether serve`` runs it under
uvicorn, and any ASGI server or app can mount it (``outer.mount("/tether", create_app(app))``).
Every request carries an identity (an API token, or a browser session made from one:
:mod:`tether.server.auth`); what it may read and do is its role's and its tenant's
(:mod:`tether.server.access`). Errors are JSON ``{"error": {"type", "message"}}``
(:mod:`tether.server.errors`); live updates are server-sent events (:mod:`tether.server.live`).

Installed with the ``server`` extra (``pip install 'tether[server]'``); ``import tether``
never imports this package, and without the extra importing it raises an ImportError
naming the missing package and the command that installs it.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401 (checked here, so the error names the extra)
    import uvicorn  # noqa: F401
except ModuleNotFoundError as e:  # pragma: no cover (the test env has the extra)
    raise ImportError(
        f"tether's server needs {e.name!r}, which is not installed: "
        f"pip install 'tether[server]'"
    ) from None

from tether.server.app import create_app

__all__ = ["create_app"]
