"""The services: what the outside asks of runs (reading, control, queues, workers, time
travel, export, retention), each given what it needs, never the App."""
