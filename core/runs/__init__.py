"""Runs in the background: a worker thread per run, the queue that admits them, their statuses."""
