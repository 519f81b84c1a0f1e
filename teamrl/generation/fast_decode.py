"""The builtin sampler's fast path: a preallocated (static) KV cache and a capturable decode step.

Same contract and same sampling as ``teamrl.generation.hf.generate`` (the reference loop);
only the cache layout differs:

- The reference loop keeps a growing cache: each decode step concatenates one column to every
  layer's keys and values, so step t copies O(t) memory and every shape changes every step.
- Here every layer's keys and values live in one tensor of shape (rows, kv heads, L, head dim)
  allocated once (transformers' ``StaticCache``), with L = prompt width + budget rounded up to a
  bucket (below). Step t writes column ``width + t`` in place. The 2-D attention
  mask is fixed for the whole call (prompt padding, then ones): the causal rule (key index <=
  query index, from the cache's own counter) hides the columns not yet written, so
  softmax gives them weight exactly 0. Every decode step therefore has the same shapes and the
  same tensor addresses, which is what CUDA graphs (``torch.compile(mode="reduce-overhead")``)
  need to replay one captured step instead of launching hundreds of small kernels.

Prefill is unchanged (dynamic cache over the distinct prompts, as in the reference); its keys and
values are then copied once into the static cache, row ``i`` from the prompt that row continues.

Equality with the reference. Prefill is bit-identical. A decode step attends over L keys instead
of ``width + t + 1``; the extra keys get weight 0, but the softmax and the weighted sum reduce
over a longer axis, so logits may differ in the last bits. Greedy decoding (temperature 0) gives
the same tokens unless two logits tie within float rounding, and the log-probs (0 under greedy;
the sampler's log-probs when sampling) agree within float tolerance. Sampling consumes the RNG
exactly as the reference does: ``sample_tokens`` draws one uniform per row from the same
(rows, vocab) shape per step, and the loop stops at the same step. With the same seed the tokens
are the same unless a last-bit difference in a probability moves a draw across a bucket edge
(never seen on the tiny models in float32; in bf16 on GPU expect rare divergences).

Eager (``generation.fast_decode=on`` on CPU), a call's cache is exactly as long as it needs and
its rows are not padded: bucketing only serves a compiled step's reuse of its shapes. It is not
the CPU's default: it skips the growing cache's copies (step t of the reference copies every
layer's t columns) but attends over the whole cache at every step, and in a process of its own,
as a run is, it sampled no faster than the reference loop on a 2-core CPU
(``benchmarks/results/magrpo_step_ab_static_cache*.md``).

Graphs. On CUDA (``graph=None``, auto) the eager decode step is captured as a CUDA graph once
per shape bucket and model and replayed at every later step (``teamrl.generation.decode_graph``):
one launch per step instead of a few hundred, captured in a fraction of a second, nothing
compiled. The first step of a new shape runs for real (the warm-up), the second is captured;
the graph is kept with the shape's static cache and replays in later calls while the cache, the
grouped LoRA stacks and the weights' addresses are the ones it recorded (else it is captured
again). Its inputs live in buffers of its own (the tokens just sampled, their positions, the
mask), refilled before each replay. ``graph=True`` elsewhere records and replays the step's
operators instead (slower than eager): how the CPU tests prove that the graphed loop gives the
eager one's tokens. A step that cannot be captured (one that reads a device value on the host)
runs eagerly with one warning.

Compilation. ``compile=True`` compiles the decode step with torch.compile instead
(``mode="reduce-overhead"``: inductor's kernels in CUDA graphs of its own; on CPU inductor's C++
kernels, which took over a minute on 2 cores for SmolLM2 and were not faster there,
docs/performance.md); auto compiles on CUDA only when ``graph`` is off. Rows that use LoRA
adapters run through the grouped multi-LoRA forward of ``teamrl.generation.multi_lora``, one set
of patched forwards and stacked adapter weights per model for every adapter mix, refreshed in
place at each call, so the compiled or graphed step replays with LoRA rows too.

Shapes. Every model compiles its own step (its own code object, so separate policies do not
share dynamo's recompile budget) with ``fullgraph=True``: the whole forward is one graph, and a
graph break is an error here rather than a silent split. The shape of a step is bucketed:

- rows: the next power of two (a call with 5 rows decodes 8; the 3 extra rows repeat row 0 and
  are dropped), so 1..256 rows fall in 9 buckets;
- cache length: prompt width + budget rounded up to the next 2^k or 3 x 2^(k-1), at least
  ``CACHE_BUCKET`` (64, 96, 128, 192, ..., 4096: 13 buckets up to 4k tokens, at most half of a
  cache unused).

An eager step (no compile) uses neither bucket: its rows as they are, its cache as long as the
call needs.

Dynamo compiles the first shape with static sizes and, at the first call whose rows (or cache
length) differ, once more with that size symbolic (its automatic dynamic shapes): a model
compiles at most three graphs per kind of call (with or without LoRA rows), however many buckets
it meets. The buckets bound what stays per shape: the CUDA graphs captured (one per distinct
shape) and the static caches. ``stats(model)`` has the buckets met and the seconds their first
calls took (the compiles, captures included); each also logs a line. At most ``max_shapes``
buckets use the compiled step per model (``generation.fast_decode_max_shapes``); a call
with a shape beyond them, or one that dynamo cannot compile, runs eagerly with one warning
naming the shape and the knob (``DecodeFallbackWarning``), never silently.

``supported(model, requests)`` says whether this path can serve a call; ``generate`` falls back
to the reference loop when it cannot (a sliding-window or hybrid cache layout; per-row adapters
on a LoRA model the grouped forward does not handle, i.e. PEFT's ``adapter_names`` route).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import types
import warnings
import weakref
from dataclasses import dataclass, field

import torch

from teamrl.generation import hf as reference
from teamrl.generation import multi_lora
from teamrl.generation.decode_graph import CaptureError, CudaGraph, OpTape, StepGraph
from teamrl.generation.hf import Batch, Decoded
from teamrl.generation.types import Request
from teamrl.tensors import cache_kwargs, output_cache

log = logging.getLogger(__name__)

CACHE_BUCKET = 64  # the smallest cache length
MAX_SHAPES = 8  # compiled shapes per model (generation.fast_decode_max_shapes)
# Static caches kept per model for reuse (one per recent shape): a repeated shape then decodes
# into the same tensors (what a CUDA graph replays), while a run that alternates between more
# shapes than this does not hold every cache at once (at 256 rows x 4k tokens of a 1.5B model
# one cache takes tens of GB).
KEPT_CACHES = 2


class DecodeFallbackWarning(UserWarning):
    """The compiled decode step could not serve a call, which then ran eagerly."""


def row_bucket(rows: int) -> int:
    """The rows a step of ``rows`` rows decodes: the next power of two."""
    return 1 << (rows - 1).bit_length()


def length_bucket(length: int) -> int:
    """The cache length for ``length`` positions: the next 2^k or 3 x 2^(k-1), at least
    ``CACHE_BUCKET`` (64, 96, 128, 192, 256, 384, ...)."""
    length = max(length, CACHE_BUCKET)
    power = 1 << (length - 1).bit_length()  # the next power of two
    return power * 3 // 4 if power * 3 // 4 >= length else power


def decline_reason(model: torch.nn.Module, requests: list[Request]) -> str | None:
    """Why the fast path cannot serve this call, or None when it can."""
    from transformers.cache_utils import StaticCache, StaticLayer

    config = model.config.get_text_config(decoder=True)
    layers = StaticCache(config=config, max_cache_len=1).layers
    if not all(type(layer) is StaticLayer for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers})
        return f"cache layout {kinds}: only full-attention layers are supported"
    if any(r.adapter is not None for r in requests):
        if not multi_lora.supported(model):
            return "per-row adapters need the grouped multi-LoRA forward (plain LoRA linears)"
    return None


def supported(model: torch.nn.Module, requests: list[Request]) -> bool:
    """True when ``generate`` runs the static-cache path for this call (else the reference)."""
    return decline_reason(model, requests) is None


@dataclass
class _State:
    """Per model: its reusable static caches, its compiled decode step and what it compiled."""

    caches: dict = field(default_factory=dict)  # shape key -> StaticCache, the most recent last
    step: object | None = None  # this model's compiled step (None: not compiled yet)
    shapes: list = field(default_factory=list)  # the (rows, cache length, LoRA) compiled
    warned: set = field(default_factory=set)  # shapes already warned about
    broken: str | None = None  # why compiling was given up for this model
    compile_s: float = 0.0  # seconds spent in the first call of each compiled shape
    eager_calls: int = 0  # calls that asked for the compiled step and ran eagerly
    graphs: dict = field(default_factory=dict)  # graph key -> _Graphed (see decode_graph)
    graph_pool: object | None = None  # the CUDA memory pool this model's graphs share
    graph_broken: str | None = None  # why capturing was given up for this model
    captures: int = 0  # graphs captured so far
    capture_s: float = 0.0  # seconds spent capturing (warm-up step included)


_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MODEL_IDS = itertools.count()


def release(model: torch.nn.Module) -> None:
    """Drop the model's reusable static caches and compiled step (frees their memory).

    The caches are kept between calls so that CUDA graphs replay at the same addresses; a
    trainer short of GPU memory for the update can release them after each rollout at the cost
    of a new allocation (and, when compiled, a new compile) at the next call.
    """
    _STATES.pop(model, None)
    multi_lora.release(model)


def stats(model: torch.nn.Module) -> dict[str, float]:
    """What the compiled path cost ``model`` so far: shape buckets compiled for, seconds spent compiling
    (the first call of each shape, capture included), calls that fell back to eager."""
    state = _STATES.get(model) or _State()
    return {
        "shapes": float(len(state.shapes)),
        "compile_s": state.compile_s,
        "eager_calls": float(state.eager_calls),
        "captures": float(state.captures),
        "capture_s": state.capture_s,
    }


def compile_seconds(models) -> float:
    """Seconds the fast path has spent compiling or capturing its step for these models so far
    (each model once, however many policies share it): the one-off cost of a new shape. A
    policy whose model lives elsewhere (a Ray worker group: ``None`` here) counts 0."""
    local = {id(m): m for m in models if m is not None}
    return sum(stats(m)["compile_s"] + stats(m)["capture_s"] for m in local.values())


def _decode_step(model, input_ids, attention_mask, position_ids, cache_kw):
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        **cache_kw,
    )
    return out.logits[:, -1]


def compile_cache_dir() -> str:
    """Where compiled decode steps are kept across runs: ``TORCHINDUCTOR_CACHE_DIR`` when the
    user set it, else ``torch-compile/`` in teamrl's cache (``TEAMRL_CACHE``, else
    ~/.cache/teamrl, as for converted models). Inductor's FX graph cache (and AOTAutograd's)
    key each compiled graph by its code, shapes, versions and settings, so a later run, or
    another process, loads the kernels it compiled instead of compiling them again; torch's own
    default is a folder under /tmp that a reboot or a fresh container empties. Set before the
    first compile, which is when inductor reads it (torch writes its default into the
    variable at its first look, so that value counts as unset)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, default_cache_dir()):
        root = os.environ.get("TEAMRL_CACHE") or os.path.join(
            os.path.expanduser("~"), ".cache", "teamrl"
        )
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "torch-compile")
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def _own_step(compile_kwargs: dict):
    """``_decode_step`` compiled under a code object of its own. Dynamo keeps its compiled
    graphs, and counts recompiles against its limit, per code object: one per model keeps one
    model's shapes from using up another's budget (separate policies decode several models).
    Its kernels go to ``compile_cache_dir``, so the next run's first step loads them."""
    compile_cache_dir()
    code = _decode_step.__code__
    code = code.replace(co_name=f"{code.co_name}_{next(_MODEL_IDS)}")
    fn = types.FunctionType(code, _decode_step.__globals__, code.co_name)
    return torch.compile(fn, mode="reduce-overhead", fullgraph=True, **compile_kwargs)


def _static_cache(model, state: _State, key: tuple, sample_kv: torch.Tensor, keep: bool = True):
    """A zeroed StaticCache for the shape ``key`` (rows, length, ...), reused when it repeats.
    ``keep=False``: a cache of this call only, which nothing holds after it."""
    from transformers.cache_utils import StaticCache

    key = (*key, sample_kv.dtype, sample_kv.device)
    cache = state.caches.pop(key, None)
    if cache is None:
        cache = StaticCache(config=model.config.get_text_config(decoder=True), max_cache_len=key[1])
    else:
        cache.reset()
    if not keep:
        return cache
    state.caches[key] = cache  # the most recent last
    while len(state.caches) > KEPT_CACHES:
        gone = state.caches.pop(next(iter(state.caches)))
        # a graph writes into its cache's memory: it goes with the cache
        state.graphs = {k: g for k, g in state.graphs.items() if g.cache is not gone}
    return cache


def _fallback(state: _State, shape: tuple, why: str, what: str = "compiled") -> None:
    """Warn once per model and shape that the compiled (or graphed) step is not used for
    ``shape``."""
    state.eager_calls += 1
    if (what, *shape) in state.warned:
        return
    state.warned.add((what, *shape))
    rows, length, lora = shape
    warnings.warn(
        f"fast_decode: the decode step for {rows} rows x {length} cache positions"
        f"{' with LoRA rows' if lora else ''} runs eagerly (slower): {why}",
        DecodeFallbackWarning,
        stacklevel=3,
    )


class _Stepper:
    """One call's decode step: compiled when the model's shape budget and dynamo allow, else
    eager (warned). Times the first call of a newly compiled shape (its compile)."""

    def __init__(self, state: _State, shape: tuple, compile: bool, max_shapes: int, device):
        self.state, self.shape, self.device = state, shape, device
        self.max_shapes = max_shapes
        self.compiled = compile and self._admit()
        self.first = self.compiled and shape not in state.shapes

    def _admit(self) -> bool:
        s = self.state
        if s.broken is not None:
            _fallback(s, self.shape, s.broken)
            return False
        if self.shape in s.shapes or len(s.shapes) < self.max_shapes:
            return True
        _fallback(
            s,
            self.shape,
            f"{len(s.shapes)} shapes already compiled ({s.shapes}) and "
            f"generation.fast_decode_max_shapes={self.max_shapes}; raise it to compile more",
        )
        return False

    def __call__(self, model, ids, mask, position, cache_kw) -> torch.Tensor:
        if not self.compiled:
            return _decode_step(model, ids, mask, position, cache_kw)
        s = self.state
        if s.step is None:
            s.step = _own_step({})
        from torch._dynamo.exc import FailOnRecompileLimitHit, TorchDynamoException
        from torch._inductor.exc import InductorError

        t0 = time.perf_counter()
        cuda = self.device.type == "cuda"
        try:
            # fullgraph=True: a graph break or dynamo's recompile limit raises instead of
            # quietly running (part of) the step eagerly; so does a backend that fails.
            with torch._dynamo.config.patch(recompile_limit=self.max_shapes):
                if cuda:
                    torch.compiler.cudagraph_mark_step_begin()
                logits = s.step(model, ids, mask, position, cache_kw)
        except (TorchDynamoException, FailOnRecompileLimitHit, InductorError) as e:
            self.compiled = False
            if isinstance(e, FailOnRecompileLimitHit):
                why = (
                    f"dynamo's recompile limit was hit (an unexpected recompile); "
                    f"generation.fast_decode_max_shapes={self.max_shapes}"
                )
            else:
                s.broken = f"it does not compile ({type(e).__name__}: {str(e).splitlines()[0]})"
                why = s.broken
            _fallback(s, self.shape, why)
            return _decode_step(model, ids, mask, position, cache_kw)
        if cuda:
            logits = logits.clone()  # the next replay overwrites the graph's output
        if self.first:
            self.first = False
            if cuda:
                torch.cuda.synchronize(self.device)
            dt = time.perf_counter() - t0
            s.shapes.append(self.shape)
            s.compile_s += dt
            rows, length, lora = self.shape
            log.info(
                "fast_decode: compiled the decode step for %d rows x %d cache positions%s in "
                "%.1f s (%d of at most %d shapes)",
                rows,
                length,
                " with LoRA rows" if lora else "",
                dt,
                len(s.shapes),
                self.max_shapes,
            )
        return logits


class _Graphed:
    """One shape's decode step as a graph (``decode_graph``): the static buffers it reads (the
    tokens just sampled, their positions, the attention mask), the cache it writes, and what
    else its recorded addresses point at (``deps``: the grouped LoRA stacks, the addresses of
    the weights), kept alive with it. A call may replay it only while all of these are the same
    objects; otherwise the shape is captured again."""

    def __init__(self, graph: StepGraph, cache, deps: tuple, keep: object, rows: int, length: int):
        self.graph, self.cache, self.deps, self.keep = graph, cache, deps, keep
        self.ready = False  # captured (else: the next step warms up, the one after captures)
        self.warm = False
        device = cache.layers[0].keys.device
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.position = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.mask: torch.Tensor | None = None  # allocated at the first call (its dtype)


def _new_graph(state: _State, device: torch.device) -> StepGraph:
    """A CUDA graph on CUDA (the model's graphs share one memory pool); elsewhere the operator
    tape, which replays the recorded step exactly as a graph would (for checking on a CPU)."""
    if device.type == "cuda":
        if state.graph_pool is None:
            state.graph_pool = torch.cuda.graph_pool_handle()
        return CudaGraph(state.graph_pool, device)
    return OpTape()


def _forward_state(target: torch.nn.Module) -> tuple:
    """Python values the step's forward reads that a graph would freeze: PEFT's active
    adapters (its wrapper picks them in Python). Part of the graph's key, so that another
    active adapter gets its own graph instead of replaying the first one's."""
    try:
        from peft import PeftModel
    except ImportError:
        return ()
    return tuple(target.active_adapters) if isinstance(target, PeftModel) else ()


def _graph_deps(model: torch.nn.Module, target: torch.nn.Module) -> tuple[tuple, object]:
    """What a captured step's addresses point at besides its buffers and cache: the weights
    (their addresses: replaced tensors, e.g. a reloaded model, need a new capture) and the
    grouped LoRA stacks (a larger call rebuilds them); the stacks are also returned, to keep."""
    stacks = multi_lora.stacks(model)
    ptrs = tuple(t.data_ptr() for t in itertools.chain(target.parameters(), target.buffers()))
    return (id(stacks), ptrs), stacks


def _graph_step(state: _State, entry: _Graphed, fn, shape: tuple) -> torch.Tensor:
    """One decode step through ``entry``'s graph: replay when captured; else the first step
    runs for real (the warm-up) and the next one captures, then replays. A step that cannot be
    captured runs eagerly from then on, with one warning."""
    if entry.ready:
        return entry.graph.replay()
    if state.graph_broken is not None:
        return fn()
    t0 = time.perf_counter()
    if not entry.warm:
        entry.warm = True
        out = entry.graph.warmup(fn)
        state.capture_s += time.perf_counter() - t0
        return out
    try:
        entry.graph.capture(fn)
    except CaptureError as e:
        state.graph_broken = f"it cannot be captured as a graph ({e})"
        state.graphs.clear()
        _fallback(state, shape, state.graph_broken, what="graph")
        return fn()
    entry.ready = True
    out = entry.graph.replay()
    if entry.cache.layers[0].keys.device.type == "cuda":
        torch.cuda.synchronize(entry.cache.layers[0].keys.device)
    dt = time.perf_counter() - t0
    state.captures += 1
    state.capture_s += dt
    rows, length, lora = shape
    log.info(
        "fast_decode: captured the decode step for %d rows x %d cache positions%s in %.2f s",
        rows,
        length,
        " with LoRA rows" if lora else "",
        dt,
    )
    return out


def _step_module(model: torch.nn.Module, lora: bool) -> torch.nn.Module:
    """The module the decode step calls. PEFT's wrapper looks up its *active* adapter in its
    forward, and the update makes each agent's adapter active in turn: dynamo guards on that
    name, so each rollout that starts with another adapter active would compile the step again
    (about a minute at 1.5B on a GPU). With LoRA rows the grouped forward routes every row to its
    own adapter and the active one plays no part, so the step calls the wrapped model itself."""
    if not lora:
        return model
    from peft import PeftModel

    return model.get_base_model() if isinstance(model, PeftModel) else model


@torch.no_grad()
def generate(
    model,
    requests: list[Request],
    eos_ids,
    pad_id,
    ignore_eos=False,
    decode=None,
    compile=None,
    max_shapes: int = MAX_SHAPES,
    keep_cache: bool | None = None,
    graph: bool | None = None,
):
    """``teamrl.generation.hf.generate`` with a static KV cache; see the module docstring.

    ``decode``: the tokenizer's, for stop strings (checked between decode steps, as in the
    reference loop). ``compile``: torch.compile the decode step (``mode="reduce-overhead"``);
    None = only on CUDA when ``graph`` is off. ``graph``: capture the eager decode step as a
    graph per shape bucket and replay it (``decode_graph``: a CUDA graph on CUDA; elsewhere the
    operator tape, which checks that the step can be graphed and is slower than eager);
    None = on CUDA unless ``compile`` is True (the compiled step brings its own graphs).
    ``max_shapes``: how many (rows, cache length) buckets compile for this model.
    ``keep_cache``: keep the static cache for the next call of the same shape (up to
    ``KEPT_CACHES`` per model, until ``release``); None = only for a compiled or graphed step,
    which replays at the cache's addresses. An eager call's cache goes with the call, as the
    reference loop's does, so the update never shares memory with a held cache. Falls back to
    the reference loop when ``supported(model, requests)`` is False.
    """
    if not any(r.n for r in requests):
        return []
    if not supported(model, requests):
        return reference.generate(model, requests, eos_ids, pad_id, ignore_eos, decode)
    device = next(model.parameters()).device
    batch = Batch(requests, pad_id, device)  # the same prefill as the reference loop
    cuda = device.type == "cuda"
    if graph is None:
        graph = cuda and not compile
    if compile is None:
        compile = cuda and not graph
    graph = graph and not compile  # a compiled step captures its own CUDA graphs
    state = _STATES.setdefault(model, _State())
    was_training = model.training
    model.eval()
    try:
        out, position = batch.prefill(model)
        dec = Decoded(batch, eos_ids, pad_id, ignore_eos, device, decode)
        n, width = len(batch.rows), batch.ids.shape[1]
        # A compiled or graphed step replays per shape, so its rows and cache length round up
        # to a bucket; an eager step has no shape to reuse and would only pay for the extra
        # rows and columns (every decode step attends over the whole cache length).
        rows, length = n, width + dec.max_new
        if compile or graph:
            rows, length = row_bucket(rows), length_bucket(length)
        # Rows n..rows-1 pad the batch to its bucket: copies of row 0, decoded and dropped.
        padded = torch.cat([batch.expand, batch.expand.new_zeros(rows - n)])
        adapters = batch.row_adapters + [None] * (rows - n)
        lora = any(a is not None for a in adapters)
        prefill = output_cache(out)
        keep = (compile or graph) if keep_cache is None else keep_cache
        cache = _static_cache(model, state, (rows, length), prefill.layers[0].keys, keep)
        for src, dst in zip(prefill.layers, cache.layers):
            # update() allocates on first use, writes columns 0..width-1, advances the counter.
            dst.update(src.keys.index_select(0, padded), src.values.index_select(0, padded))
        logits, last_pos = out.logits[batch.expand, -1], position[padded, -1]
        del out, prefill
        # Fixed for the whole call: the prompt's padding, then ones (causality hides the rest).
        mask = torch.ones((rows, length), dtype=batch.attn.dtype, device=device)
        mask[:, :width] = batch.attn[padded]
        ids = torch.full((rows, 1), pad_id, dtype=torch.long, device=device)
        cache_kw = cache_kwargs(model, cache)  # outside the step: nothing to trace
        step = _Stepper(state, (rows, length, lora), compile, max_shapes, device)
        with reference._adapters(model, adapters):
            target = _step_module(model, lora)
            entry = None
            if graph and state.graph_broken is None:
                # A graph reads its inputs at fixed addresses: this shape's own buffers.
                entry = _graph_entry(state, model, target, cache, (rows, length, lora))
                if entry.mask is None:
                    entry.mask = mask
                else:
                    entry.mask.copy_(mask)
                mask, ids = entry.mask, entry.ids
                ids.fill_(pad_id)

                def graphed_step():
                    return _decode_step(target, entry.ids, entry.mask, entry.position, cache_kw)

            for t in range(dec.max_new):
                if dec.sample(t, logits):
                    break
                last_pos = last_pos + 1
                ids[:n] = dec.tokens[:, t : t + 1]
                if entry is None:
                    logits = step(target, ids, mask, last_pos.unsqueeze(-1), cache_kw)[:n]
                    continue
                entry.position.copy_(last_pos.unsqueeze(-1))
                out = _graph_step(state, entry, graphed_step, (rows, length, lora))
                logits = out[:n].clone()  # the next replay overwrites the graph's output
    finally:
        model.train(was_training)
    return dec.generations()


def _graph_entry(state: _State, model, target, cache, shape: tuple) -> _Graphed:
    """The graph of this shape for this call: the kept one while it still points at this
    cache, these stacks and these weights, else a new one (captured during the call)."""
    rows, length, _ = shape
    key = (*shape, _forward_state(target))
    deps, keep = _graph_deps(model, target)
    entry = state.graphs.get(key)
    if entry is None or entry.cache is not cache or entry.deps != deps:
        graph = _new_graph(state, cache.layers[0].keys.device)
        entry = state.graphs[key] = _Graphed(graph, cache, deps, keep, rows, length)
    return entry
