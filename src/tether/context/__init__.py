"""What a model sees: conversations, memory, artifacts, and the context window built from them.

``tether.context.build`` assembles a model's context window from a run or a session
(see ``docs/context.md``); the rest of the package is reached through ``App``.
"""

from tether.context.window import Context, Entry, Handle, Policy, Report, build, entries, recall

__all__ = ["Context", "Entry", "Handle", "Policy", "Report", "build", "entries", "recall"]
