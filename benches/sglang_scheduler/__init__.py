"""SGLang 0.5.16's own scheduling and memory code, driven on SGLang's unified pool or on
the ukv drop-in (``benches/sglang_scheduler_driver.py`` is the command line).

One concept per module: ``config`` (a run's configuration and the test matrix),
``bootstrap`` (making SGLang importable, the drop-in, the server arguments), ``events``
(forward streams and events), ``values`` (the bytes a token's K/V and a state hold),
``stack`` (the pools, the tree cache, the idle check), ``forward`` (the model stand-in),
``shadow`` (what every live token and state must hold), ``trace`` (seeded arrivals),
``loop`` (the scheduler's event loop) and ``cli``.
"""
