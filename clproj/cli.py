"""The ``clproj`` command line: one subcommand per module, each registering itself.

Every module listed in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds
its subcommand(s) and sets ``func`` (taking the parsed ``argparse.Namespace`` and
returning an exit code). Keeping the commands beside the code they drive keeps this file
small and lets each package own its user interface.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from clproj import __version__, streams
from clproj.console import stderr
from clproj.errors import ClprojError

COMMAND_MODULES = [
    "clproj.miniemu.cli",
    "clproj.devices.cli",
    "clproj.devices.profile_cli",
    "clproj.benchmarks.cli",
    "clproj.doctor",
    "clproj.intercept.cli",
    "clproj.runtime.run.cli",
    "clproj.runtime.cluster.cli",
    "clproj.runtime.projection.cli",
    "clproj.runtime.evaluation.cli_evaluate",
    "clproj.runtime.partition.cli",
    "clproj.runtime.evaluation.cli_validate",
    "clproj.runtime.evaluation.cli_published",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clproj",
        description="Project which device of a heterogeneous cluster runs each OpenCL kernel fastest, "
        "and send it there.",
    )
    parser.add_argument("--version", action="version", version=f"clproj {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # before anything is printed: clproj's own output never fails a run (clproj.streams)
    streams.protect()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from clproj import settings

        settings.check_all()
        return int(args.func(args) or 0)
    except ClprojError as exc:
        stderr.print(f"[bold red]error:[/] {exc.cause}", highlight=False)
        if exc.fix:
            stderr.print(f"  [bold]fix:[/] {exc.fix}", highlight=False)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        # A path the user named that cannot be made, read or written (--record, --report,
        # --build-dir under a read-only or missing parent): the system's reason and the
        # path, one line, like every other error.
        path = exc.filename or ""
        what = f"{exc.strerror or exc}" + (f": {path}" if path else "")
        stderr.print(f"[bold red]error:[/] {what}", highlight=False)
        stderr.print(
            "  [bold]fix:[/] check that the path exists and that you may read or write it",
            highlight=False,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
