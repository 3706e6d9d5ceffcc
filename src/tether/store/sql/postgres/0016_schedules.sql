-- tether schema 16 (PostgreSQL), as sql/sqlite/0016_schedules.sql: schedules. One row per
-- schedule: the agent it starts with its inputs, when (spec: 'cron:<5 fields>' or
-- 'every:<seconds>'), the next tick to fire (next_at) and whether missed ticks are all
-- fired (catch_up 1) or only the newest (0). A tick's run id is derived from the
-- schedule and the tick, so workers that race to fire one tick create one run; the
-- worker that fires it moves next_at on with a compare-and-set.
CREATE TABLE schedules (
    name       TEXT COLLATE "C" PRIMARY KEY,
    agent      TEXT NOT NULL,
    spec       TEXT NOT NULL,
    inputs     TEXT NOT NULL,
    queue      TEXT NOT NULL,
    catch_up   SMALLINT NOT NULL,
    paused     SMALLINT NOT NULL DEFAULT 0,
    next_at    DOUBLE PRECISION NOT NULL,
    last_tick  DOUBLE PRECISION,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
