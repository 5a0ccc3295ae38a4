"""SGLang's own scheduler and memory code (0.5.16 or 0.5.23, whichever ``UKV_SGLANG_PATH``
holds) on SGLang's unified pool or on the ukv drop-in, side by side, with every live
token's K/V and state checked after every step.

The driver is the package ``benches/sglang_scheduler`` (one module per concept; its
``__init__`` lists them); this is its command line. One process runs one pool::

    UKV_SGLANG_PATH=/path/sgl016:/path/sgl016-deps PYTHONPATH=python \\
        python benches/sglang_scheduler_driver.py --pool ukv --hybrid swa --page-size 16 --lazy
    ... --pool sglang --hybrid mamba --page-size 1 --eager --steps 200 --seed 3
    ... --device cuda --scale 8 --forward-delay-us 200
    ... --pool ukv --hybrid mamba --spec-drafts 3   # every decode a speculative verify step

It prints one line per scheduler iteration (admitted tokens, decode tokens, running,
waiting, retracted) and a final ``SUMMARY <json>``; the exit status is 0 when every check
passed. ``tests/test_sglang_scheduler.py`` runs the configuration matrix on both pools.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sglang_scheduler.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
