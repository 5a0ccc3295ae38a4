"""Differential test of ukv's public surface: a seeded random engine drives a real pool
and a pure-Python model side by side, and every step checks the pool against the model
(issue 18). ``model`` knows what every live id must hold, ``queued`` is the one place that
knows how frees of device ids are queued, ``driver`` is the engine and the checker."""
