"""SGLang's own scheduling and memory code (0.5.16 or 0.5.23), driven on SGLang's unified
pool or on the ukv drop-in (``benches/sglang_scheduler_driver.py`` is the command line).

One concept per module: ``config`` (a run's configuration and the matrix), ``bootstrap``
(making SGLang importable, the drop-in, the server arguments), ``patches`` (the SGLang
defects the driver works around, each reported), ``paths`` (SGLang methods whose calls it
counts, running them unchanged), ``events`` (forward streams and events, real on CUDA,
modelled on the CPU), ``values`` (what a token's K/V and a state hold),
``stack`` (the pools, the tree cache, the idle check, as SGLang builds them), ``forward``
(the model stand-in, with the speculative verify step), ``shadow`` (what every live token
and state must hold, and the read-back), ``trace`` (seeded arrivals), ``loop`` (0.5.16's
scheduler event loop), ``loop0523`` (0.5.23's), ``release`` (the version seam: everything
that differs between the two releases is answered there), ``cli`` (one pool per
process), ``compare`` and ``sidebyside`` (both pools over the matrix).
"""
