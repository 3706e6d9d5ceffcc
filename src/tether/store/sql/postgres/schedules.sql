-- Named queries of the schedules (tether.store.schedule_rows) on PostgreSQL (the table
-- of 0016_schedules.sql), as sql/sqlite/schedules.sql. Each block: "-- name: <name>",
-- then a one-line purpose, then the statement.

-- name: _columns
-- A schedule's columns, in ScheduleRecord's order.
name, agent, spec, inputs, queue, catch_up, paused, next_at, last_tick, created_at, updated_at

-- name: put_schedule
-- Add a schedule, or change one: its next tick is kept unless its timing changed.
INSERT INTO schedules AS s (name, agent, spec, inputs, queue, catch_up, paused, next_at,
                            last_tick, created_at, updated_at)
VALUES (%(name)s, %(agent)s, %(spec)s, %(inputs)s, %(queue)s, %(catch_up)s, 0, %(next_at)s,
        NULL, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE SET
    agent = excluded.agent,
    inputs = excluded.inputs,
    queue = excluded.queue,
    catch_up = excluded.catch_up,
    next_at = CASE WHEN s.spec = excluded.spec THEN s.next_at
                   ELSE excluded.next_at END,
    spec = excluded.spec,
    updated_at = excluded.updated_at;

-- name: get_schedule
-- One schedule by name.
SELECT {{_columns}} FROM schedules WHERE name = %(name)s;

-- name: list_schedules
-- Every schedule, by name.
SELECT {{_columns}} FROM schedules ORDER BY name;

-- name: advance_schedule
-- Move a schedule's next tick on, if no one did first (it is still at :from_at); also when
-- a pause came after its ticks fired (their runs exist: last_tick says so; a resume sets
-- next_at again).
UPDATE schedules SET next_at = %(to_at)s, last_tick = %(tick)s, updated_at = %(now)s
WHERE name = %(name)s AND next_at = %(from_at)s;

-- name: pause_schedule
-- Pause a schedule (its ticks are not fired while it is).
UPDATE schedules SET paused = 1, updated_at = %(now)s WHERE name = %(name)s AND paused = 0;

-- name: resume_schedule
-- Resume a paused schedule from its next tick after now.
UPDATE schedules SET paused = 0, next_at = %(next_at)s, updated_at = %(now)s
WHERE name = %(name)s AND paused = 1;

-- name: delete_schedule
-- Forget a schedule (the runs it started stay).
DELETE FROM schedules WHERE name = %(name)s;
