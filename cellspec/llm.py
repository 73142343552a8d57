"""The high-level API: `LLM(model).generate(prompts, SamplingParams)` and `LLM.stream`.

Every call tokenizes and validates all its prompts before a session is opened, then runs them
through one continuous-batching scheduler; every session it opened is closed when it returns or
raises, or when a stream is closed early.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cellspec import artifact as names
from cellspec.artifact import Manifest
from cellspec.errors import InvalidArgument
from cellspec.model_cache import resolve_model
from cellspec.request import Request, RequestOutput, SamplingParams
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.lookup import LOOKUP_MATCH
from cellspec.runtime.spec_options import check_lookup, check_tree_choices
from cellspec.scheduler import (
    DEFAULT_CHAIN_STEPS,
    DEFAULT_MAX_PREFILL_TOKENS,
    PrefillCallback,
    Scheduler,
    check_chain_steps,
)
from cellspec.tokenizer import IncrementalDetokenizer, Tokenizer

if TYPE_CHECKING:
    from cellspec.export.config import ExportConfig

__all__ = ["LLM", "RequestOutput", "SamplingParams"]


# On the CPU a verify costs about its width in steps, so few proposals pay best: with the shipped
# SmolLM2 draft (tau 2.2), 3 proposals gave 1.17x plain decoding at batch 1 where 15 gave 0.90x
# (bench/NOTES.md). With int4 weights a verify row costs more still (a cycle of 2 proposals 1.6
# steps, of 3 1.9), and 2 proposals gave 1.31x plain where 3 gave 1.19x. On a GPU a verify of 16
# costs about a step, and the default stays block - 1.
CPU_N_DRAFT = {"none": 3, "int4": 2}
# ... unless the draft's confidence cuts each cycle's proposals: with a draft threshold of 0.2
# (a cycle verifies its leading proposals while the product of the draft's probabilities stays
# >= 0.2) and up to 7 proposals, the shipped draft gave 1.42x plain at batch 1 against 1.30x for
# 2 fixed proposals (int4), and 1.71x against 1.53x for 3 (float32; bench/NOTES.md, seventh
# sitting of 2026-12-02). So on `ort-cpu` that is the default; with the threshold off
# (draft_threshold=0), CPU_N_DRAFT again.
CPU_DRAFT_THRESHOLD, CPU_CUT_N_DRAFT = 0.2, 7
# With several sessions the cut is the most any of them keeps, and at 4 sessions (int4) 7 cut
# proposals gave 0.94x plain where 2 gave 1.14x; so with the cut, a cycle of O sessions
# proposes at most CPU_MAX_VERIFY_ROWS // O - 1 each (7 at 1 session, 5 at 2, 3 at 3, 2 at 4).
CPU_MAX_VERIFY_ROWS = 12
# ... and a cycle for many sessions costs more than it saves: with the shipped draft, speculation
# gave 1.54x plain at batch 1, 1.2-1.5x at 2, 1.0-1.1x at 4, 0.9x at 8 and 0.73x at 16 (1.07x
# with this limit; bench/NOTES.md). Above this many pending sessions, `ort-cpu` steps plainly.
CPU_MAX_SPEC_BATCH = 4
# On `ort-cuda` with CellAttention (its default where the plugin builds) a verify of several
# sessions costs more than with standard ops: on the H200 (the real SmolLM2 in float16, shipped
# draft) speculation gave 1.84x / 1.83x plain at 1 session (15 / 7 proposals), 1.47x / 1.55x at
# 2, 1.04x / 1.23x at 4 and 0.75x / 0.87x at 8; with standard ops 1.16-1.18x at 8
# (bench/NOTES.md, sixth sitting). So with CellAttention: 7 proposals. Since plain decoding
# runs in chains that hide the host (eighth sitting, chains of 8), speculation gave 1.42x plain
# at 1 session, 1.26x at 2, 0.94x at 4 and 0.92x at 8 with at most 4 speculating; with at most
# 2: 1.48x, 1.27x, 1.06x, 1.01x. So at most 2 sessions speculate.
CELL_N_DRAFT, CELL_MAX_SPEC_BATCH = 7, 2
# ... and there a session drawing with a temperature does not speculate: its verify runs the
# sampler over every row (1.41 against 1.09 ms greedy at 1 session) and accepts less (tau 1.75
# at 0.7 / top_p 0.9 against 2.69 greedy), so speculation gave 0.95-1.01x plain at 1 session
# and 0.74-0.80x at 2 (H200, 2026-12-03, bench/NOTES.md). Greedy sessions still speculate.
CELL_SPECULATE_SAMPLED = False
# ... except with trees when at most CELL_TREE_SPECULATE_SAMPLED sessions could speculate: a
# tree of 15 accepts more of a sampled text (tau 2.22 against 1.75 for the chain of 7), and gave
# 1.26x plain at 1 session, 0.90x at 2 (H200, 2026-12-03, third sitting, bench/NOTES.md), so 1
# then; with the trees grown and walked on the device, every session sampled at 0.7 / top_p 0.9,
# 1.31-1.50x at 1 session, 1.13-1.24x at 2, 1.13-1.19x at 3 and 1.00-1.04x at 4 (2026-12-04,
# fifth sitting, three processes, each batch's graphs captured before its timing).
CELL_TREE_SPECULATE_SAMPLED = 3
# ... and a cycle verifies a tree of proposals (runtime/trees.py) rather than a chain: each row
# of the verify sees only its ancestors, which CellAttention keys by position, so the text is
# unchanged. On the H200 (real SmolLM2 float16, 16 held-out prompts, one call; bench/NOTES.md,
# 2026-12-03, second sitting) a tree of 15 proposals up to 15 deep gave tau 3.47 against 2.69
# for a chain of 7, and the most tokens/s at 1 and 2 sessions (a tree of 31: tau 3.69, slower).
# Again on an H100 with today's kernels (2026-12-06, tenth sitting, 32-row verifies, arms
# interleaved): trees of 31 and 23 2.0x plain against 2.45x for 15, on quick and slow hosts alike.
CELL_TREE_NODES = 15
# ... and with trees, since each cycle queues the next block and verify before its verdict
# (2026-12-04, third sitting), speculation pays at 3 and 4 sessions too where the verify stays
# narrow: at most CELL_TREE_MAX_VERIFY_ROWS rows (trees of 15 at 1 session, 7 at 2, 4 at 3, 3
# at 4) and at most CELL_TREE_MAX_SPEC_BATCH sessions speculating. On the H200 (real SmolLM2
# float16, 16 held-out prompts, 4 processes) 16 rows against none gave +5-14% at 2 sessions,
# and 4 sessions speculating gave 1.22-1.31x plain (one process 0.91x; no row limit:
# 1.16-1.26x) where the limit of 2 stepped them plainly (bench/NOTES.md).
CELL_TREE_MAX_VERIFY_ROWS, CELL_TREE_MAX_SPEC_BATCH = 16, 4
# On `ort-cpu` a cycle's chain goes on after the draft's cut proposals with up to this many
# tokens looked up in the session's own text (DFlashExecutor's lookup_tokens: those that
# followed the longest, latest earlier match of its last 6 to 8 tokens; runtime/lookup.py).
# 32 held-out prompts, 256 greedy tokens, 2 threads (bench/NOTES.md, 2026-12-05): float32
# 2.04x -> 2.24x plain (tau 2.79 -> 3.00), int4 1.99x -> 2.03x (2.67 -> 2.88); the same text.
CPU_LOOKUP_TOKENS = 8


def tree_defaults(backend: str, folder: Path, manifest: Manifest, tree_nodes: int | None,
                  draft_threshold: float | None) -> int | None:
    """The nodes of each cycle's tree (None: chains): `tree_nodes` where given (0: chains),
    else CELL_TREE_NODES on `ort-cuda` with CellAttention when the draft gives its choices
    (exported since trees), no threshold is asked and no layer has a sliding window."""
    from cellspec.runtime.ort_device import cuda_attention  # imported with a backend

    if tree_nodes is not None:  # (LLM checked it)
        return tree_nodes or None
    nodes = min(CELL_TREE_NODES, manifest.max_step_width - 1)
    if backend != "ort-cuda" or cuda_attention() != "cell" or draft_threshold is not None \
            or manifest.draft is None or manifest.window or nodes < 2 \
            or not draft_gives_choices(folder, manifest):
        return None  # (a tree step makes no sliding-window masks)
    return nodes


def check_tree_nodes(tree_nodes: int | None) -> int | None:
    """LLM's tree_nodes: None or an int >= 0."""
    if tree_nodes is not None and (isinstance(tree_nodes, bool) or not isinstance(
            tree_nodes, int) or tree_nodes < 0):
        raise InvalidArgument(f"tree_nodes {tree_nodes!r}: expected an int >= 0 (0: chains) "
                              "or None (the backend's default)")
    return tree_nodes


def draft_gives_choices(folder: Path, manifest: Manifest) -> bool:
    """Whether the artifact's draft_block outputs each row's top choices (a tree's)."""
    import onnx

    assert manifest.draft is not None
    graph = onnx.load(str(folder / manifest.draft.block_graph), load_external_data=False)
    return names.TOP_IDS in {o.name for o in graph.graph.output}


def speculation_defaults(backend: str, manifest: Manifest, n_draft: int | None,
                         max_spec_batch: int | None, draft_threshold: float | None = None,
                         tree_nodes: int | None = None
                         ) -> tuple[int | None, int | None, float | None, int | None]:
    """Proposals per cycle (a tree's depth), the most sessions speculating at once and the
    draft threshold, where the caller left them None, and the verify row limit: what pays best
    on this backend (None: the executor's own default, block - 1 proposals, no limit and no
    threshold)."""
    from cellspec.runtime.ort_device import cuda_attention  # imported with a backend, not cellspec

    if backend == "ort-cpu":
        threshold = CPU_DRAFT_THRESHOLD if draft_threshold is None else draft_threshold
        cut = threshold is not None and threshold != 0  # a bad value is refused by the executor
        # the row limit goes with the cut (fixed proposals stay as asked)
        best = (CPU_CUT_N_DRAFT if cut else CPU_N_DRAFT[manifest.target.quantization],
                CPU_MAX_SPEC_BATCH, threshold, CPU_MAX_VERIFY_ROWS if cut else None)
    elif backend == "ort-cuda" and cuda_attention() == "cell" and tree_nodes:
        # a tree as deep as the block allows (its nodes bound its verify's width)
        best = (manifest.draft.block_size - 1, CELL_TREE_MAX_SPEC_BATCH, draft_threshold,
                CELL_TREE_MAX_VERIFY_ROWS)
    elif backend == "ort-cuda" and cuda_attention() == "cell":
        best = (CELL_N_DRAFT, CELL_MAX_SPEC_BATCH, draft_threshold, None)
    else:
        return n_draft, max_spec_batch, draft_threshold, None
    assert manifest.draft is not None
    return (min(best[0], manifest.draft.block_size - 1) if n_draft is None else n_draft,
            best[1] if max_spec_batch is None else max_spec_batch, best[2], best[3])


def lookup_defaults(backend: str, tree_nodes: int | None, lookup_tokens: int | None) -> int:
    """Tokens looked up after each chain's proposals: `lookup_tokens` where given, else
    CPU_LOOKUP_TOKENS on `ort-cpu` (chains), none elsewhere (not measured there) or with
    trees."""
    if lookup_tokens is not None:
        return lookup_tokens
    return CPU_LOOKUP_TOKENS if backend == "ort-cpu" and not tree_nodes else 0


def speculates_sampled(backend: str, tree_nodes: int | None = None) -> bool | int:
    """Whether sessions that draw with a temperature speculate on this backend (greedy ones
    always do; DFlashExecutor's speculate_sampled): on `ort-cuda` with CellAttention not with
    chains (CELL_SPECULATE_SAMPLED), with trees when at most CELL_TREE_SPECULATE_SAMPLED
    sessions could."""
    from cellspec.runtime.ort_device import cuda_attention  # imported with a backend

    if backend != "ort-cuda" or cuda_attention() != "cell":
        return True
    return CELL_TREE_SPECULATE_SAMPLED if tree_nodes else CELL_SPECULATE_SAMPLED


class LLM:
    """A model ready to generate. `model`: an artifact folder, a checkpoint (HF folder or .gguf,
    exported once into the cache) or None for the bundled SmolLM2-135M-Instruct. `chat`: wrap
    prompts in the chat template (default: when the model has one). `speculation`: DFlash
    speculate-verify cycles (default: when the artifact has a draft, as the bundled model is
    exported); the text is the same either way. `n_draft`: proposals per cycle (default: block
    size - 1, on `ort-cpu` at most CPU_CUT_N_DRAFT with the draft threshold, CPU_N_DRAFT of the
    weight format without it, on `ort-cuda` with CellAttention at most CELL_N_DRAFT in a chain;
    a tree's depth, block size - 1 by default).
    `max_spec_batch`: the most sessions that speculate in one step; with more, the step is
    plain (default: no limit, CPU_MAX_SPEC_BATCH on `ort-cpu`, CELL_MAX_SPEC_BATCH with
    CellAttention). `draft_threshold` t in [0, 1): each cycle verifies
    only the leading proposals whose running product of the draft's probabilities stays >= t
    (at least one; the same text, a narrower verify where the draft is unsure; default:
    CPU_DRAFT_THRESHOLD on `ort-cpu`, else none; 0: none). `chain_steps`: where the backend
    runs ahead (`ort-cuda`), steps that only decode run as chains of up to this many (the host
    plans each step while the device runs the one before; 1 = none). On `ort-cuda` with
    CellAttention sessions that draw with a temperature do not speculate in chains
    (CELL_SPECULATE_SAMPLED: there it does not pay), and with trees only when at most
    CELL_TREE_SPECULATE_SAMPLED sessions could; greedy ones do. `tree_nodes`: each cycle verifies a
    tree of this many proposals, grown from the draft's top choices per row (0: a chain; default:
    CELL_TREE_NODES on `ort-cuda` with CellAttention, the one backend that verifies a tree as
    plain decoding rounds; elsewhere chains). `lookup_tokens`: each chain goes on after the
    draft's proposals with up to this many tokens looked up in the session's own text (what
    followed the latest earlier occurrence of its last few tokens; the same text; default:
    CPU_LOOKUP_TOKENS on `ort-cpu`, else 0; 0: none). `tree_choices`: a tree takes the first
    this many of each row's choices (1..TOP_K; default: all; 1: the chain of first choices,
    verified, grown on the device and queued as a tree, without siblings at one position)."""

    def __init__(self, model: str | Path | None = None, *, backend: str = "ort-cpu",
                 max_sessions: int = 8, max_session_tokens: int = 0, threads: int | None = None,
                 export_config: ExportConfig | None = None, chat: bool | None = None,
                 max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS,
                 speculation: bool | None = None, n_draft: int | None = None,
                 max_spec_batch: int | None = None, draft_threshold: float | None = None,
                 chain_steps: int = DEFAULT_CHAIN_STEPS,
                 tree_nodes: int | None = None, lookup_tokens: int | None = None,
                 tree_choices: int | None = None) -> None:
        self.chain_steps = check_chain_steps(chain_steps)
        check_tree_nodes(tree_nodes)
        check_tree_choices(tree_choices)
        if lookup_tokens is not None:
            check_lookup(lookup_tokens, LOOKUP_MATCH)
        if chat is not None and not isinstance(chat, bool):
            raise InvalidArgument(f"chat {chat!r}: expected True, False or None")
        if speculation is not None and not isinstance(speculation, bool):
            raise InvalidArgument(f"speculation {speculation!r}: expected True, False or None")
        self.folder = resolve_model(model, export_config, speculation=speculation is True)
        manifest = Manifest.load(self.folder)
        has_draft = manifest.draft is not None
        if speculation and not has_draft:
            raise InvalidArgument(f"speculation=True, but {self.folder} has no draft "
                                  "(export it with --draft)")
        limits = dict(backend=backend, max_sessions=max_sessions,
                      max_session_tokens=max_session_tokens, threads=threads)
        self.executor: Executor | DFlashExecutor
        if has_draft and speculation is not False:
            tree_nodes = tree_defaults(backend, self.folder, manifest, tree_nodes,
                                       draft_threshold)
            n_draft, max_spec_batch, draft_threshold, rows = speculation_defaults(
                backend, manifest, n_draft, max_spec_batch, draft_threshold, tree_nodes)
            self.executor = DFlashExecutor.load(self.folder, **limits, n_draft=n_draft,
                                                max_spec_batch=max_spec_batch,
                                                draft_threshold=draft_threshold,
                                                max_verify_rows=rows,
                                                speculate_sampled=speculates_sampled(
                                                    backend, tree_nodes),
                                                tree_nodes=tree_nodes,
                                                tree_choices=tree_choices,
                                                lookup_tokens=lookup_defaults(
                                                    backend, tree_nodes, lookup_tokens))
        elif n_draft is not None or max_spec_batch is not None or draft_threshold is not None \
                or tree_nodes or lookup_tokens or tree_choices is not None:
            name = ("n_draft" if n_draft is not None else
                    "max_spec_batch" if max_spec_batch is not None else
                    "draft_threshold" if draft_threshold is not None else
                    "tree_nodes" if tree_nodes else
                    "tree_choices" if tree_choices is not None else "lookup_tokens")
            raise InvalidArgument(f"{name} is set, but speculation is off")
        else:
            self.executor = Executor.load(self.folder, **limits)
        self.tokenizer = Tokenizer.load(self.folder, self.executor.manifest)
        if chat and not self.tokenizer.has_chat_template:
            raise InvalidArgument(f"chat=True, but {self.folder} has no chat template")
        self.chat = self.tokenizer.has_chat_template if chat is None else chat
        if self.chat:
            self.tokenizer.check_chat_template()
        self.max_prefill_tokens = max_prefill_tokens
        self._make_scheduler()  # validates max_prefill_tokens now rather than at first use

    @property
    def manifest(self) -> Manifest:
        return self.executor.manifest

    def generate(self, prompts: str | Sequence[str],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = False,
                 on_prefill: PrefillCallback | None = None) -> list[RequestOutput]:
        """Generate for every prompt (one params for all, or one each); outputs in prompt order.
        `on_prefill(done, total)` is called after each step that fed prompt tokens: `done` of
        the `total` prompt tokens of this call are in the cache."""
        from tqdm import tqdm

        requests = self.make_requests(prompts, params)
        scheduler = self._make_scheduler(on_prefill)
        try:
            with tqdm(total=len(requests), disable=not use_tqdm, desc="generate") as bar:
                for request in requests:
                    scheduler.add(request)
                while scheduler.has_work:
                    bar.update(len(scheduler.step()))
        finally:
            scheduler.abort()
        return [request.output() for request in requests]

    def stream(self, prompt: str, params: SamplingParams | None = None,
               on_prefill: PrefillCallback | None = None) -> Iterator[str]:
        """Text deltas of one prompt's output as tokens arrive; they concatenate to the text
        `generate` returns. Validates before returning; close the iterator to stop early.
        `on_prefill` as in `generate`."""
        if not isinstance(prompt, str):
            raise InvalidArgument(f"prompt {prompt!r}: stream takes one str")
        if params is not None and not isinstance(params, SamplingParams):
            raise InvalidArgument(f"params {params!r}: expected one SamplingParams")
        [request] = self.make_requests([prompt], params)
        return self._stream(request, on_prefill)

    def make_requests(self, prompts: str | Sequence[str],
                      params: SamplingParams | Sequence[SamplingParams] | None) -> list[Request]:
        """Tokenize and validate every prompt; nothing is opened."""
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, Sequence) or len(prompts) == 0:
            raise InvalidArgument(f"prompts {prompts!r}: expected a str or a non-empty list")
        per_prompt = _params_per_prompt(params, len(prompts))
        requests = []
        for index, (prompt, request_params) in enumerate(zip(prompts, per_prompt)):
            if isinstance(prompt, str):
                check_not_empty(index, prompt)
            ids = self.tokenizer.encode(prompt, self.chat)
            if not ids:
                raise InvalidArgument(f"prompt {index}: encodes to no tokens")
            self._check_budget(index, len(ids))
            requests.append(Request(prompt, tuple(ids), request_params,
                                    IncrementalDetokenizer(self.tokenizer)))
        return requests

    def _check_budget(self, index: int, num_tokens: int) -> None:
        """A prompt must leave room for at least one output token in its session's budget."""
        budget = self.executor.max_session_tokens
        if num_tokens < budget:
            return
        if budget == self.manifest.max_context:
            hint = f"the model's context is {budget} tokens; shorten the prompt"
        else:
            hint = ("give each session more: lower max_sessions or raise max_session_tokens; or "
                    "shorten the prompt")
        raise InvalidArgument(f"prompt {index}: {num_tokens} tokens leave no room in the budget "
                              f"of {budget} tokens per session ({hint})")

    def _stream(self, request: Request, on_prefill: PrefillCallback | None) -> Iterator[str]:
        scheduler = self._make_scheduler(on_prefill)
        try:
            scheduler.add(request)
            while scheduler.has_work:
                scheduler.step()
                text = request.take_unread()
                if text:
                    yield text
        finally:
            scheduler.abort()

    def _make_scheduler(self, on_prefill: PrefillCallback | None = None) -> Scheduler:
        return Scheduler(self.executor, self.tokenizer.eos_token_ids, self.max_prefill_tokens,
                         on_prefill, self.chain_steps)


def check_not_empty(index: int, prompt: str) -> None:
    """Prompt `index` must hold more than whitespace (the command line checks it before a first
    use's export, LLM when it makes the requests)."""
    if not prompt.strip():
        raise InvalidArgument(f"prompt {index}: empty (or only whitespace)")


def _params_per_prompt(params: SamplingParams | Sequence[SamplingParams] | None,
                       count: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * count
    if isinstance(params, SamplingParams):
        return [params] * count
    if not isinstance(params, Sequence) or not all(isinstance(p, SamplingParams) for p in params):
        raise InvalidArgument(f"params {params!r}: expected SamplingParams or a list of them")
    if len(params) != count:
        raise InvalidArgument(f"params: {len(params)} SamplingParams for {count} prompts")
    return list(params)
