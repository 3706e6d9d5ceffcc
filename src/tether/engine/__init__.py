"""The engine: executes agents (registry, journal and replay, the run object, effects,
gates, compensation, fan-out, leases, the executor) over the store's protocol."""
