"""The ``e1`` command line: the root app that registers the subcommands (:mod:`e1.cli.app`), the options
several commands share (:mod:`e1.cli.options`), how --help reads (:mod:`e1.cli.help`), tab completion of
option values (:mod:`e1.cli.completion`) and ``e1 help`` (:mod:`e1.cli.topics`). The subcommands are in
e1/commands/, one thin module each, parsing options into one config and calling one library function."""

from e1.cli.app import main

__all__ = ["main"]
