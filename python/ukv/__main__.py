"""Command line: ``python -m ukv <command> [options]``.

Each command is a module with ``add_arguments(parser)`` and ``run(args) -> exit code``;
adding one is one entry in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "ukv.demo.cli",
        "serve a small hybrid model through ukv and check it against a reference",
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen command."""
    parser = argparse.ArgumentParser(prog="python -m ukv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, (module, help_text) in COMMANDS.items():
        modules[name] = importlib.import_module(module)
        modules[name].add_arguments(sub.add_parser(name, help=help_text))
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args))


if __name__ == "__main__":
    sys.exit(main())
