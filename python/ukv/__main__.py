"""Command line: ``python -m ukv <command> [options]``, the same as the ``ukv`` console
script (``demo``, ``plan``, ``simulate``; see :mod:`ukv.cli`)."""

from __future__ import annotations

import sys

from ukv.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m ukv"))
