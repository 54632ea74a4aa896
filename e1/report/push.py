"""``e1 export --push``: a hub export's eval-results files uploaded to a model repository, within a deadline.

    push(written, "my-org/E1-Math-1.5B")   # the commit's URL; or one line: refused, failed, or no answer in time

The hub is an outside server like any other e1 talks to: every reply is read through e1's one bounded
client (:func:`e1.engine.bounded_client`: a deadline and a size cap), the whole push ends within
:data:`HUB_DEADLINE_S` whatever the hub sends or withholds, and the token (``HF_TOKEN`` or the login
file's) is masked in every line e1 prints.
"""

from __future__ import annotations

from pathlib import Path

from e1 import __version__
from e1.errors import ConfigError, hub_endpoint, redact, register_secret
from e1.report.hub_export import check_repo_id
from e1.report.within import within

HUB_DEADLINE_S = 300.0  # the whole push: every request, retry and wait the hub asks for (a reply: <= 8 MiB)


def push(written: list[Path], repo: str, deadline_s: float | None = None) -> str:
    """Upload a hub export's ``.eval_results/*.yaml`` (the Hub's eval-results files) to the model repository
    ``repo`` through huggingface_hub (creating it if needed; ``HF_TOKEN`` or ``hf auth login`` authenticates,
    ``HF_ENDPOINT`` names another hub); returns the commit's URL (redacted). The model card is not uploaded:
    a repository's README is its authors' (merge the exported one by hand). The whole push ends within
    ``deadline_s`` (None: :data:`HUB_DEADLINE_S`), every reply read through e1's bounded client
    (:func:`e1.engine.bounded_client`)."""
    from huggingface_hub import HfApi, get_token

    deadline_s = HUB_DEADLINE_S if deadline_s is None else deadline_s
    repo = check_repo_id(repo)
    folders = {path.parent.parent if path.parent.name == ".eval_results" else path.parent for path in written}
    if len(folders) != 1:
        raise ConfigError(
            f"--push takes a run of one model; this run has {len(folders)}",
            hint="export a sweep's models/<model> run directories one by one, each with its --push",
        )

    from huggingface_hub import constants

    hub_endpoint(constants.ENDPOINT)

    def upload() -> str:
        register_secret(get_token())  # HF_TOKEN or the login file's token: masked in every line e1 prints
        api = HfApi()
        api.create_repo(repo, exist_ok=True)
        return str(
            api.upload_folder(
                folder_path=str(next(iter(folders))),
                repo_id=repo,
                allow_patterns=[".eval_results/*.yaml"],
                commit_message=f"Eval results from e1 {__version__}",
            )
        )

    with _bounded_hub(deadline_s):
        return redact(_within(deadline_s, upload, repo))


def _within(deadline_s: float, call, repo: str):
    """``call()`` given up at ``deadline_s`` (:func:`e1.report.within.within`: the hub's client sleeps between its
    retries for as long as a reply asks); its failure as one line."""
    hint = "log in (hf auth login, or set HF_TOKEN) with write access to the repository, and check HF_ENDPOINT"
    late = ConfigError(f"cannot push to {repo}: the hub did not answer within {deadline_s:g} s", hint=hint)
    try:
        return within(call, deadline_s, lambda: late)
    except Exception as err:
        if err is late:
            raise
        from e1.engine import transport_reason

        reason = transport_reason(err, deadline_s) or (str(err).splitlines() or [type(err).__name__])[0][:300]
        raise ConfigError(f"cannot push to {repo}: {reason}", hint=hint) from None


class _bounded_hub:
    """huggingface_hub's shared client, for the push, e1's bounded one (then the hub's own again)."""

    def __init__(self, deadline_s: float):
        self.deadline_s = deadline_s

    def __enter__(self):
        from huggingface_hub.utils import _http, set_client_factory

        from e1.engine import bounded_client

        default = _http.default_client_factory
        hooks = {"request": [_http.hf_request_event_hook]}
        like = type(_http.get_session())
        set_client_factory(lambda: bounded_client(self.deadline_s, like, event_hooks=hooks, follow_redirects=True))
        self.restore = lambda: set_client_factory(default)

    def __exit__(self, *exc) -> None:
        self.restore()
