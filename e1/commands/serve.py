"""`e1 serve`: vLLM's OpenAI-compatible server with separate thinking and solution budgets."""

from __future__ import annotations

from typing import Annotated

import typer

from e1.cli.help import command_app
from e1.cli.options import SERVER, option_class, with_options
from e1.serve import ServeConfig

EXAMPLES = """Examples:

  e1 serve --model Salesforce/E1-Math-1.5B --think 1k --solve 1k
  e1 serve --model ./my-model --think 2k --solve 512 \\
      --mode elastic:exit=qwen:grace=32
  e1 serve --model ./my-model --port 8001 -- --enable-prefix-caching \\
      --max-num-seqs 64"""


# the options of ServeConfig's settings (model, host, port, reasoning parser), its defaults' (--think,
# --solve, --mode) and its engine's (dtype, vLLM's settings, think markers): the declarations `e1 eval` reads too
ServeOptions = option_class("ServeOptions", ServeConfig)


@with_options
def serve_command(
    *,
    options: ServeOptions,
    print_command: Annotated[
        bool, typer.Option("--print-command", help="Print the vLLM server command and exit.", rich_help_panel=SERVER)
    ] = False,
    vllm_args: Annotated[
        list[str] | None, typer.Argument(show_default=False, help="More vLLM server options, after --.")
    ] = None,
) -> None:
    """Serve a model with vLLM's OpenAI-compatible server and e1's budgets.

    Requests may set thinking_budget, solution_budget and budget_mode (top level or in
    vllm_xargs); --think/--solve/--mode are the defaults. Responses add per-phase token counts.
    """
    from e1.serve import command_line, serve
    from e1.settings import unflatten

    config = ServeConfig(**unflatten(ServeConfig, vars(options)), vllm_args=tuple(vllm_args or ()))
    if print_command:
        typer.echo(command_line(config))
        return
    serve(config)


app = command_app(serve_command, no_args_is_help=True, epilog=EXAMPLES)
