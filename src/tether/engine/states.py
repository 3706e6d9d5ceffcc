"""A run's state read from its log: the newest snapshot plus a fold of the rest.

Snapshots are a read-side cache: a load that folded ``snapshot_every`` events or more
saves the state it computed, so that the next load starts from there. Steps never pay
for snapshots.
"""

from __future__ import annotations

import logging

from tether.errors import TetherError
from tether.model import inputs, integrity
from tether.model.clock import Clock
from tether.model.state import RunState, fold
from tether.store import Store, snapshots

log = logging.getLogger("tether")


class States:
    """Loads runs' states from ``store`` (caching a snapshot every ``snapshot_every``
    events folded)."""

    def __init__(self, store: Store, clock: Clock, snapshot_every: int = 500) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be >= 1, not {snapshot_every}")
        self.store = store
        self.clock = clock
        self.snapshot_every = snapshot_every

    def load(self, run_id: str, *, upto: int | None = None) -> RunState:
        """The run's state (at ``upto``, or its head): newest snapshot + fold of the rest.
        Raises RunDamaged when the log has a gap or disagrees with the row (see
        :mod:`tether.model.integrity`)."""
        inputs.lookup_id(run_id)
        if upto is not None:
            inputs.integer(upto, "upto", low=0)
        loaded = self.store.load(run_id, upto=upto)
        integrity.check_events(run_id, loaded.events, loaded.snapshot.seq if loaded.snapshot else 0)
        start = snapshots.load(self.store, loaded.snapshot) if loaded.snapshot else None
        state = fold(loaded.events, start, run_id=run_id)
        if upto is None:
            integrity.check_row(run_id, loaded.run.status, state.status, state.seq)
        # a read-only store (a replica: read_only=) cannot cache; its primary's loads do
        if len(loaded.events) >= self.snapshot_every and not getattr(self.store, "read_only", 0):
            self.cache(state)
        return state

    def cache(self, state: RunState) -> None:
        """Save ``state`` as a snapshot; a cache that cannot be written is not an error."""
        try:
            snapshots.save(self.store, state, self.clock.now())
        except TetherError as e:
            log.warning("could not save a snapshot of run %s: %s", state.run_id, e)
