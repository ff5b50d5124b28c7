"""The ``clproj`` command line: one subcommand per module, each registering itself.

Every module named in ``COMMANDS`` exposes ``register(subparsers)``, which adds its
subcommand(s) and sets ``func`` (taking the parsed ``argparse.Namespace`` and returning
an exit code). Keeping the commands beside the code they drive keeps this file small and
lets each package own its user interface.

A command imports only its own module: ``clproj run``'s parser alone takes 0.123 s of a
whole Python process against 0.163 s for all thirteen (median of 10 interleaved pairs,
2-core VM), and ``clproj run`` pays its start-up before the app starts. The full list is
built for help, for no command and for a name that is none of them (argparse then lists
the choices).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

from clproj import __version__, streams
from clproj.errors import ERROR_STATUS, ClprojError

# Subcommand -> the module that registers it, in the order ``clproj --help`` lists them
# (tests/test_foundation.py checks that each module registers exactly its names).
COMMANDS = {
    "emulate": "clproj.miniemu.cli",
    "devices": "clproj.devices.cli",
    "profile-device": "clproj.devices.profile_cli",
    "bench": "clproj.benchmarks.cli",
    "doctor": "clproj.doctor",
    "records": "clproj.intercept.cli",
    "replay": "clproj.intercept.cli",
    "run": "clproj.runtime.run.cli",
    "broker": "clproj.runtime.cluster.cli",
    "node": "clproj.runtime.cluster.cli",
    "status": "clproj.runtime.cluster.cli",
    "keys": "clproj.runtime.cluster.cli",
    "project": "clproj.runtime.projection.cli",
    "evaluate": "clproj.runtime.evaluation.cli_evaluate",
    "advise-partition": "clproj.runtime.partition.cli",
    "validate": "clproj.runtime.evaluation.cli_validate",
    "validate-published": "clproj.runtime.evaluation.cli_published",
}
COMMAND_MODULES = list(dict.fromkeys(COMMANDS.values()))


def _command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level
    options, ``--help`` and ``--version``, take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: with the one module its command needs, else with all."""
    parser = argparse.ArgumentParser(
        prog="clproj",
        description="Project which device of a heterogeneous cluster runs each OpenCL kernel fastest, "
        "and send it there.",
    )
    parser.add_argument("--version", action="version", version=f"clproj {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = _command(sys.argv[1:] if argv is None else argv)
    for name in [COMMANDS[command]] if command in COMMANDS else COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # before anything is printed: clproj's own output never fails a run (clproj.streams)
    streams.protect()
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from clproj import settings

        settings.check_all()
        return int(args.func(args) or 0)
    except ClprojError as exc:
        _error(exc.cause, exc.fix, getattr(args, "json", False), exc.status)
        return exc.status
    except KeyboardInterrupt:  # Ctrl-C: end as interrupted, so a shell loop stops too
        from clproj.lifeline import die_by

        die_by(signal.SIGINT)
        return 130
    except OSError as exc:
        # A path the user named that cannot be made, read or written (--record, --report,
        # --build-dir under a read-only or missing parent): the system's reason and the
        # path, one line, like every other error.
        path = exc.filename or ""
        what = f"{exc.strerror or exc}" + (f": {path}" if path else "")
        return _error(
            what,
            "check that the path exists and that you may read or write it",
            getattr(args, "json", False),
        )


def _error(cause: str, fix: str | None, as_json: bool = False, status: int = ERROR_STATUS) -> int:
    """Say a failed command's cause and fix on stderr, and with ``--json`` as a JSON
    document on stdout too (a script reading stdout gets a document, not nothing); its
    exit status. The console (rich,
    0.08 s of imports on the 2-core VM) is imported here, not at start-up: ``clproj run``
    pays its start-up before the app starts, and loads its report's console while the app
    runs (``clproj run --mode observe`` of a 0.5 s app, 15 pairs with farm-bench: 0.756 s
    against 0.781 s with the console imported first)."""
    from clproj.console import stderr

    stderr.print(f"[bold red]error:[/] {cause}", highlight=False)
    if fix:
        stderr.print(f"  [bold]fix:[/] {fix}", highlight=False)
    if as_json:
        import json

        doc = {"format": "clproj.error", "version": 1, "error": cause, "fix": fix}
        print(json.dumps({**doc, "status": status}), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
