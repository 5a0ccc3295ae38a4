"""The built-in demo: a small hybrid model serving through a ukv pool, checked against a
reference that keeps its cache in plain per-request tensors.

- :mod:`~ukv.demo.model`: the seeded model (Mamba-hybrid and SWA-hybrid variants).
- :mod:`~ukv.demo.pooled`: its cache through ukv; :mod:`~ukv.demo.reference`: without.
- :mod:`~ukv.demo.serve`: the continuous-batching loop; :mod:`~ukv.demo.run`: one run.
- :mod:`~ukv.demo.report`: the printed report and the arena PNG; :mod:`~ukv.demo.cli`.
- :mod:`~ukv.demo.synthetic`: the older byte-pattern demo (``--synthetic``).
"""
