-- tether schema 18 (SQLite): what each worker serves, for `tether workers` and the runs
-- no live worker serves (`tether runs --count`): NULL, every run (no agent registered at
-- a version); else the JSON of its claim filter, {"pinned": [agent…], "served": [[agent,
-- version]…]} (docs/deploys.md, "Versions"). A worker of an older tether writes NULL,
-- which is true of it: it claims every run.
ALTER TABLE workers ADD COLUMN serves TEXT;
