-- tether schema 16 (SQLite): schedules (tether.services.schedules). One row per schedule:
-- the agent it starts with its inputs, when (spec: 'cron:<5 fields>' or
-- 'every:<seconds>'), the next tick to fire (next_at) and whether missed ticks are all
-- fired (catch_up 1) or only the newest (0). A tick's run id is derived from the
-- schedule and the tick, so workers that race to fire one tick create one run; the
-- worker that fires it moves next_at on with a compare-and-set.
CREATE TABLE schedules (
    name       TEXT PRIMARY KEY,
    agent      TEXT NOT NULL,
    spec       TEXT NOT NULL,
    inputs     TEXT NOT NULL,
    queue      TEXT NOT NULL,
    catch_up   INTEGER NOT NULL,
    paused     INTEGER NOT NULL DEFAULT 0,
    next_at    REAL NOT NULL,
    last_tick  REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
