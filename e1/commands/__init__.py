"""One thin module per subcommand of `e1` (data, demo, elo, eval, export, serve, sweep, train, view):
each parses its options into one config, calls one library function and renders the result.
The app that registers them, the options they share, help and completion are in e1/cli/."""
