"""A training step's memory, estimated from the config and the models' shapes alone.

``estimate_memory(cfg, models, prompt_len)`` is the low-end estimate the preflight
(``teamrl.preflight``) compares with the free memory, and a Ray worker's share of it
(``preflight.worker_estimate``) is computed from it: what the step needs at least, so that a
config is refused only when it cannot fit. ``measured_memory()`` is its measured counterpart,
which the trainer logs every step (``memory/*``): an app's calls and prompt lengths are the
app's own, so for an app the estimate counts ``env.max_turns`` calls per agent and the
measurement is what tells.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from teamrl.config import Config
from teamrl.config.policy_map import adapters_per_model, model_copies, policy_agents, uses_lora
from teamrl.config.step_shape import step_shape

if TYPE_CHECKING:
    import torch

GiB = 1024**3


@dataclass
class Estimate:
    """Bytes of one training step, by part."""

    weights: float
    optimizer: float  # gradients and optimizer state (two AdamW moments; none for SGD)
    generation: float  # KV cache and prefill logits of the largest generate call
    training: float  # activations and logits of one micro-batch's forward and backward
    rows: int  # sequences in the largest generate call
    seq: int  # tokens per sequence (prompt budget + completions)
    replica: float = 0.0  # a sharded worker's full copy of the weights, to sample from

    @property
    def total(self) -> float:
        return self.weights + self.replica + self.optimizer + max(self.generation, self.training)

    def describe(self) -> str:
        replica = f", sampling replica {self.replica / GiB:.2f}" if self.replica else ""
        return (
            f"{self.total / GiB:.1f} GiB (weights {self.weights / GiB:.2f}{replica}, optimizer and "
            f"gradients {self.optimizer / GiB:.2f}, generation {self.generation / GiB:.2f} for "
            f"{self.rows:,} sequences of {self.seq:,} tokens, training forward "
            f"{self.training / GiB:.2f})"
        )


def estimate_memory(cfg: Config, models: dict[str, Any], prompt_len: int) -> Estimate:
    """A step's peak memory from the config alone: a low-end estimate (what the step needs at
    least), so a config is refused only when it cannot fit.

    weights: params * dtype bytes per model copy ('separate': one per agent); LoRA adds
    r * (in + out) per linear layer and adapter. Trainable parameters (all of a full
    fine-tune, the adapters with LoRA) carry a gradient and two AdamW moments (3 more copies;
    1, the gradient, under ``train.optim=sgd``);
    beta > 0 without LoRA adds a frozen reference copy. Sampling on CPU in float32 with
    ``generation.cpu_prepack`` adds one packed copy of the linear weights: kept for the run when
    they are frozen (the LoRA base, counted in weights), rebuilt at each rollout otherwise
    (counted in generation). ``train.bf16`` adds the update's bf16 copy of the adapted base
    weights (``bf16_copy_elements``).

    generation: rows = prompts_per_step * agents * G (AT-GRPO/GRPO: K), times the tree's
    branching at the deepest MAGRPO level. Every row holds its own KV cache,
    rows * seq * 2 * layers * kv_heads * head_dim * bytes, with seq = prompt budget +
    max_turns * max_completion_length; plus fp32 logits rows * vocab * 4 twice per token.

    training: one micro-batch of m samples (a policy's samples / num_mini_batches, or
    micro_batch_size), ``micro_batch_bytes``: its distinct prompts (m / G: a group shares one)
    and its completions keep about 16 * hidden + 4 * intermediate activations per layer and
    token (measured); on the padded path (train.padding_free=false) each sample copies its
    prompt's KV cache (and runs in full under checkpointing), and each completion token
    keeps LOGIT_ROWS fp32 vocab rows. With train.max_tokens_per_micro_batch below the
    micro-batch's forward tokens, the term shrinks in proportion to the budget (or to one
    sample, when a sample alone is longer).
    """
    a, t = cfg.algorithm, cfg.train
    n_agents = len(cfg.team.agents)
    nbytes = {"float32": 4, "bfloat16": 2, "float16": 2}[cfg.model.dtype]
    lora = uses_lora(cfg)
    shapes = {name: _shape(model) for name, model in models.items()}

    weights = optimizer = repacked = 0.0
    per_trainable = 1 if t.optim == "sgd" else 3  # copies per trainable parameter
    packs = _packs_weights(cfg)
    adapters_per_copy = adapters_per_model(cfg)
    for name in model_copies(cfg):
        s = shapes[name]
        weights += s["params"] * nbytes
        if lora:
            adapter = s["lora_in_out"] * cfg.model.lora_r * adapters_per_copy
            weights += adapter * nbytes
            optimizer += per_trainable * adapter * nbytes
        else:
            optimizer += per_trainable * s["params"] * nbytes
            if a.beta > 0:
                weights += s["params"] * nbytes
        if lora and t.bf16:  # the update's bf16 copy of the adapted base weights
            weights += bf16_copy_elements(s, cfg.model.lora_target_modules) * 2
        if packs and lora:
            weights += s["params"] * 4
        elif packs:
            repacked += s["params"] * 4

    turns, g = cfg.env.max_turns, a.num_generations
    completion = max(ag.max_completion_length for ag in cfg.team.agents)
    seq = prompt_len + turns * completion
    shape = step_shape(cfg)  # the recipe's count of a step's generation rows and samples
    rows, samples = shape.generation_rows, shape.samples
    big = max(shapes.values(), key=lambda s: s["params"])
    generation = rows * seq * 2 * big["layers"] * big["kv_dim"] * nbytes + rows * big["vocab"] * 8
    generation += repacked

    widest = max(len(members) for members in policy_agents(cfg).values())
    per_policy = math.ceil(samples * widest / n_agents)  # the busiest policy's samples
    minibatch = math.ceil(per_policy / t.num_mini_batches)
    micro = min(t.micro_batch_size or minibatch, minibatch)
    checkpointing = cfg.model.gradient_checkpointing
    shape = dict(rows=micro, prompts=math.ceil(micro / g), prompt_len=seq - completion)
    shape.update(completion_len=completion, nbytes=nbytes, checkpointing=checkpointing)
    shape.update(packed=t.padding_free)
    training = micro_batch_bytes(big, **shape)
    budget = t.max_tokens_per_micro_batch
    tokens = micro_batch_tokens(**shape)
    if budget is not None and tokens > budget:  # a chunk holds the budget, or one sample
        training *= max(budget, seq) / tokens
    return Estimate(weights, optimizer, generation, training, rows, seq)


# The weight of each LoRA target of a llama-shaped layer, in units of the layer's sizes
# (hidden h, the k/v width kv, the MLP's inter i): q and o are h x h, k and v h x kv, the MLP's
# three h x i. A target of another name counts 0 (the estimate errs low).
_TARGET_SIZE = {
    "q_proj": lambda s: s["hidden"] ** 2,
    "o_proj": lambda s: s["hidden"] ** 2,
    "k_proj": lambda s: s["hidden"] * s["kv_dim"],
    "v_proj": lambda s: s["hidden"] * s["kv_dim"],
    "gate_proj": lambda s: s["hidden"] * s["inter"],
    "up_proj": lambda s: s["hidden"] * s["inter"],
    "down_proj": lambda s: s["hidden"] * s["inter"],
}


def bf16_copy_elements(shape: dict[str, int], targets: list[str]) -> int:
    """Elements of train.bf16's copy of the adapted base weights (teamrl.update.lora_linear):
    every layer's LoRA targets."""
    per_layer = sum(_TARGET_SIZE[t](shape) for t in set(targets) if t in _TARGET_SIZE)
    return shape["layers"] * per_layer


def _packs_weights(cfg: Config) -> bool:
    """Whether the hf sampler will use oneDNN-packed weight copies (teamrl.generation.cpu_prepack)."""
    import torch

    g, m = cfg.generation, cfg.model
    on_cpu = m.device == "cpu" or (m.device == "auto" and not torch.cuda.is_available())
    return g.backend == "hf" and g.cpu_prepack != "off" and m.dtype == "float32" and on_cpu


def _shape(model: Any) -> dict[str, int]:
    import torch

    params = sum(p.numel() for p in model.parameters())
    lora_in_out = sum(
        m.in_features + m.out_features
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
    )
    return {"params": params, "lora_in_out": lora_in_out, **shape_of(model.config)}


def shape_of(config: Any) -> dict[str, int]:
    """The sizes the activation estimate reads, from a transformers config."""
    c = config.get_text_config()
    hidden = c.hidden_size
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    return {
        "layers": c.num_hidden_layers,
        "hidden": hidden,
        "inter": getattr(c, "intermediate_size", None) or 4 * hidden,
        "kv_dim": kv_heads * head_dim,
        "vocab": c.vocab_size,
    }


# Activations the backward keeps, per layer and forward token, in elements of the model's
# dtype: about 16 * hidden + 4 * intermediate. Measured, not derived: benchmarks/update_memory.py
# fits it on SmolLM2-135M (hidden 576, intermediate 1536) and a Qwen2.5-0.5B shape (896, 4864)
# in eager float32 on CPU, where the norms, rotary embeddings, attention and SwiGLU each keep
# several hidden-sized tensors (the textbook 4 * hidden + 3 * intermediate is a third of it).
ACTIVATION_HIDDEN, ACTIVATION_INTER = 16, 4
# fp32 vocab rows per completion token: about 4 with chosen_logprob's backward, 6 with
# autograd's composition (gather - logsumexp); benchmarks/results/update_memory.md measures
# the slope. Kept at 6 as headroom: an estimate that errs low lets a run start that then runs
# out of memory, and the prompt-heavy LoRA points already sit close below the measured peak.
LOGIT_ROWS = 6


def micro_batch_tokens(
    rows: int,
    prompts: int,
    prompt_len: int,
    completion_len: int,
    checkpointing: bool,
    packed: bool = False,
    **_,
) -> int:
    """Forward tokens of one micro-batch (teamrl.update.micro_batches.forward_tokens):
    each distinct prompt once and each completion after it (packed rows, or the padded path's
    prompt cache), or, padded under gradient checkpointing, every sample in full."""
    if checkpointing and not packed:
        return rows * (prompt_len + completion_len)
    return prompts * prompt_len + rows * completion_len


def micro_batch_bytes(
    shape: dict[str, int],
    *,
    rows: int,
    prompts: int,
    prompt_len: int,
    completion_len: int,
    nbytes: int,
    checkpointing: bool = False,
    packed: bool = False,
) -> float:
    """What one forward + backward of the update adds to memory (bytes): the kept activations
    of its forward tokens (each layer's input only under gradient checkpointing, plus one layer
    recomputed in full), each sample's copy of its prompt's KV cache (the padded path without
    checkpointing; a packed row attends to its prompt in place), and LOGIT_ROWS fp32 vocab rows
    per completion token."""
    tokens = micro_batch_tokens(rows, prompts, prompt_len, completion_len, checkpointing, packed)
    layer = (ACTIVATION_HIDDEN * shape["hidden"] + ACTIVATION_INTER * shape["inter"]) * nbytes
    if checkpointing:
        kept = tokens * (shape["layers"] * shape["hidden"] * nbytes + layer)
    elif packed:
        kept = tokens * shape["layers"] * layer
    else:
        kv_token = 2 * shape["layers"] * shape["kv_dim"] * nbytes
        kept = tokens * shape["layers"] * layer + rows * prompt_len * kv_token
    return kept + rows * completion_len * shape["vocab"] * 4 * LOGIT_ROWS


def measured_memory(device: torch.device | None = None) -> dict[str, float]:
    """This process's memory as measured, in GiB: its resident set now (``rss_gib``) and at its
    peak so far (``peak_rss_gib``, the kernel's high-water mark, which never falls), and on a
    CUDA ``device`` the most allocated so far (``cuda_peak_gib``; the counter is read, never
    reset, so a caller's own peak measurement is left as it was). The host figures are Linux's
    (``/proc/self/statm``); elsewhere they are left out.
    The resident set includes what the C allocator keeps after tensors are freed: glibc's
    heap keeps the high-water mark of a step's largest forward (teamrl.scale.cpu_malloc)."""
    out: dict[str, float] = {}
    try:
        import resource

        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
        out["rss_gib"] = resident_pages * os.sysconf("SC_PAGE_SIZE") / GiB
        out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB
    except (ImportError, OSError, ValueError):
        pass
    if device is not None and device.type == "cuda":
        import torch

        out["cuda_peak_gib"] = torch.cuda.max_memory_allocated(device) / GiB
    return out
