"""Command line: ``python -m ukv demo [options]``."""

from __future__ import annotations

import argparse
import sys

from ukv import demo


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen command."""
    parser = argparse.ArgumentParser(prog="python -m ukv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_arguments(sub.add_parser("demo", help="serve a phase-shifting synthetic workload"))
    args = parser.parse_args(argv)
    return demo.run(args)


if __name__ == "__main__":
    sys.exit(main())
