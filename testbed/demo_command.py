"""``trio-typha demo``: the subcommand the test bed adds to the ``trio-typha`` command.

The ``trio_typha.commands`` entry point (testbed/pyproject.toml) names :data:`COMMAND`;
trio-typha loads it to build its parser, so this imports only the options, and the demo
itself once it runs.
"""

from __future__ import annotations

import argparse

from .demo_options import add_arguments


class DemoCommand:
    """``trio-typha demo`` (the shape :class:`trio_typha.cli.Command` asks for)."""

    help = ("the whole system on this machine: an API server, three replicas, an agent "
            "fleet, churn, a dashboard and a convergence verdict")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        from .demo import run
        return run(args)


COMMAND = DemoCommand()
