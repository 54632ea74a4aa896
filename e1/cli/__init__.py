"""The ``e1`` command line: the root app (:mod:`e1.cli.app`), the options several commands share
(:mod:`e1.cli.options`) and one thin module per subcommand (data, demo, elo, eval, serve, sweep,
train), each parsing options into one config and calling one library function."""

from e1.cli.app import main

__all__ = ["main"]
