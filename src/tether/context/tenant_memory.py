"""One tenant's long-term memory: ``app.for_tenant(t).memory``, ``app.scoped(i).memory``.

A tenant's items are stored under the namespace ``("@tenant", TENANT, *namespace)``:
the tenant's view adds the two parts to every namespace it is given and takes them off
every item and namespace it returns, so a tenant can neither name nor search nor forget
another tenant's items (a search's prefix is a range of the stored namespaces that
starts with the tenant's own). The unscoped ``app.memory`` sees every tenant's items
under ``("@tenant", …)``; keep ``@tenant`` for this use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.context.memory import Memory, MemoryItem, Mode, Namespace

ROOT = "@tenant"


class TenantMemory:
    """:class:`~tether.context.memory.Memory` limited to one tenant (see the module
    docstring); the same methods, namespaces relative to the tenant's."""

    def __init__(self, memory: Memory, tenant: str) -> None:
        self.memory = memory
        self.tenant = tenant

    def _ns(self, namespace: Sequence[str]) -> Namespace:
        if isinstance(namespace, str):  # as Memory refuses it: a str is not a tuple
            raise TypeError(f"a namespace is a tuple of str, not the str {namespace!r}")
        return (ROOT, self.tenant, *namespace)

    def _item(self, item: MemoryItem) -> MemoryItem:
        return replace(item, namespace=item.namespace[2:])

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Any,
        *,
        text: str | None = None,
        ttl: float | str | None = None,
    ) -> MemoryItem:
        """:meth:`Memory.put` in this tenant's namespace."""
        return self._item(self.memory.put(self._ns(namespace), key, value, text=text, ttl=ttl))

    def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """:meth:`Memory.get` in this tenant's namespace."""
        found = self.memory.get(self._ns(namespace), key)
        return self._item(found) if found is not None else None

    def delete(self, namespace: Sequence[str], key: str) -> bool:
        """:meth:`Memory.delete` in this tenant's namespace."""
        return self.memory.delete(self._ns(namespace), key)

    def delete_namespace(self, prefix: Sequence[str]) -> int:
        """:meth:`Memory.delete_namespace` under this tenant's namespace (an empty prefix
        forgets every item of this tenant, and only of this tenant)."""
        return self.memory.delete_namespace(self._ns(prefix))

    def list_namespaces(
        self, prefix: Sequence[str] = (), *, limit: int | None = None
    ) -> list[Namespace]:
        """:meth:`Memory.list_namespaces` under this tenant's namespace."""
        found = self.memory.list_namespaces(self._ns(prefix), limit=limit)
        return [ns[2:] for ns in found]

    def search(
        self,
        namespace_prefix: Sequence[str] = (),
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        mode: Mode = "auto",
    ) -> list[MemoryItem]:
        """:meth:`Memory.search` under this tenant's namespace."""
        found = self.memory.search(
            self._ns(namespace_prefix), query, filter=filter, limit=limit, mode=mode
        )
        return [self._item(i) for i in found]
