"""`e1 serve`: vLLM's OpenAI-compatible server with separate thinking and solution budgets."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from e1.cli.completion import complete_mode
from e1.cli.help import command_app
from e1.cli.options import BUDGETS, SERVER, ModelOpt, mode_help, option_class, with_options
from e1.serve import ServeConfig

EXAMPLES = """Examples:

  e1 serve --model Salesforce/E1-Math-1.5B --think 1k --solve 1k
  e1 serve --model ./my-model --think 2k --solve 512 \\
      --mode elastic:exit=qwen:grace=32
  e1 serve --model ./my-model --port 8001 -- --enable-prefix-caching \\
      --max-num-seqs 64"""


# the options of ServeConfig's settings (host, port, reasoning parser) and its engine's (dtype, vLLM's
# settings, think markers): the same declarations `e1 eval` reads
ServeOptions = option_class("ServeOptions", ServeConfig)


@with_options
def serve_command(
    *,
    model: ModelOpt,
    think: Annotated[Optional[str], typer.Option(
        "--think", "-t", show_default=False, rich_help_panel=BUDGETS,
        help="Default thinking budget t (512, 1k, ...) for requests that name none.")] = None,
    solve: Annotated[Optional[str], typer.Option(
        "--solve", "-s", show_default=False, rich_help_panel=BUDGETS,
        help="Default solution budget s; give both or neither (neither: such requests are served plainly).")] = None,
    mode: Annotated[str, typer.Option(
        "--mode", autocompletion=complete_mode, rich_help_panel=BUDGETS,
        help=mode_help("Default mode") + " Served as in e1 eval, but for budget-forcing's wait=K; early-exit (DEER's recipe "
        "unless recipe=e1) runs in several requests per sample, not streamed (at most 64 trial answers per sample).")] = "elastic",
    options: ServeOptions,
    print_command: Annotated[bool, typer.Option("--print-command", help="Print the vLLM server command and exit.",
                                                rich_help_panel=SERVER)] = False,
    vllm_args: Annotated[Optional[list[str]], typer.Argument(show_default=False,
                                                             help="More vLLM server options, after --.")] = None,
) -> None:
    """Serve a model with vLLM's OpenAI-compatible server and e1's budgets.

    Requests may set thinking_budget, solution_budget and budget_mode (top level or in
    vllm_xargs); --think/--solve/--mode are the defaults. Responses add per-phase token counts.
    """
    from e1.budget import parse_tokens
    from e1.serve import ServeDefaults, command_line, serve
    from e1.settings import unflatten

    settings = unflatten(ServeConfig, vars(options))
    engine = settings["engine"]
    defaults = ServeDefaults(
        think=None if think is None else parse_tokens(think, "think budget"),
        solve=None if solve is None else parse_tokens(solve, "solve budget"),
        mode=mode, think_start=engine.think_start, think_end=engine.think_end,
    )
    config = ServeConfig(model=model, defaults=defaults, vllm_args=tuple(vllm_args or ()), **settings)
    if print_command:
        typer.echo(command_line(config))
        return
    serve(config)


app = command_app(serve_command, no_args_is_help=True, epilog=EXAMPLES)
