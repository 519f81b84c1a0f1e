"""The config sections for the engines around training: generation backends and scale-out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from teamrl.config.fields import _f


@dataclass
class GenerationConfig:
    backend: Literal["hf", "vllm"] = _f(
        "hf",
        "Generation backend: 'hf' samples with teamrl's KV-cache loop on the trainer's own model "
        "(CPU and GPU); 'vllm' uses vLLM (needs: pip install 'teamrl[vllm]').",
    )
    fast_decode: Literal["auto", "on", "off"] = _f(
        "auto",
        "hf backend only: decode with a preallocated (static) KV cache, and on CUDA a decode "
        "step captured as a CUDA graph per shape bucket (see fast_decode_graph and "
        "fast_decode_compile). Same tokens as the growing-cache loop under greedy decoding. "
        "'auto' = on with CUDA, off elsewhere (on CPU, eager, it attends over the whole cache at "
        "every step and was not faster than the growing cache); 'on' uses it on CPU too; "
        "'off' = the growing-cache reference loop.",
    )
    fast_decode_graph: Literal["auto", "on", "off"] = _f(
        "auto",
        "hf backend, with the fast path: capture the eager decode step once per shape bucket "
        "and model (rows to a power of two, cache length to 2^k or 3*2^(k-1)) and replay it "
        "at every later step: on CUDA a CUDA graph (one launch per step instead of hundreds, "
        "captured in well under a second, nothing compiled); elsewhere a replay of the "
        "recorded operators, which checks on a CPU that a model's step can be graphed and is "
        "slower than eager. 'auto' = on with CUDA unless fast_decode_compile=on; a step that "
        "cannot be captured runs eagerly with one warning.",
    )
    fast_decode_compile: Literal["auto", "on", "off"] = _f(
        "auto",
        "hf backend, with the fast path: compile its decode step with torch.compile "
        "(fullgraph; mode='reduce-overhead', its own CUDA graphs, on CUDA; inductor's C++ "
        "kernels on CPU), once per shape bucket and model. Compiling takes about a minute per "
        "model at the first run (kernels are then cached on disk, see docs/performance.md). "
        "'auto' = on with CUDA only when fast_decode_graph=off; 'on' compiles on CPU too (and "
        "turns fast_decode on; on a 2-core CPU it took minutes and was not faster).",
    )
    fast_decode_max_shapes: int = _f(
        8,
        "hf backend, compiled fast path: at most this many (rows, cache length) buckets compile "
        "per model (rows bucket to powers of two, cache lengths to 2^k or 3*2^(k-1)); a call "
        "beyond them, or one that dynamo cannot compile, runs eagerly with one warning.",
    )
    sampler_dtype: Literal["model", "bfloat16"] = _f(
        "model",
        "hf backend only: sample from the trainer's weights in their own dtype ('model'), or "
        "from a copy of them in bfloat16 ('bfloat16'), refreshed after every optimizer step, "
        "while the update trains the model.dtype weights. On CPUs with bf16 instructions "
        "(AVX512-BF16, AMX) bf16 products run several times faster than float32 ones, but at "
        "8 rows of SmolLM2 on 2 cores sampling was 1.16x slower than float32's prepacked path "
        "(docs/performance.md): measure before use. The sampler's log-probs differ from the "
        "trainer's, so the importance-sampling correction turns on "
        "(algorithm.importance_sampling_correction auto). Costs one bf16 copy of the weights.",
    )
    cpu_prepack: Literal["auto", "on", "off"] = _f(
        "auto",
        "hf backend only: while sampling on CPU in float32, multiply by copies of the large "
        "weights re-laid out in oneDNN's blocked format (trainable ones repacked every rollout, "
        "frozen ones kept): faster decoding at small batches (docs/performance.md); costs one more copy of "
        "the float32 weights in memory. 'auto' = on wherever it applies; 'on' errors where it "
        "cannot (GPU, bf16).",
    )
    # The vllm_* fields only matter with backend=vllm. Names follow TRL's GRPOConfig.
    vllm_gpu_memory_utilization: float = _f(
        0.3,
        "Fraction of the GPU's memory vLLM may take (weights + KV cache), colocated with the "
        "trainer in one process: keep it low enough that training fits beside it (TRL's "
        "default, 0.3). Ignored on CPU.",
    )
    vllm_enable_sleep_mode: bool = _f(
        False,
        "Put the vLLM engine to sleep (weights offloaded, KV cache freed) between rollout and "
        "update, and wake it before the next rollout: more GPU memory for training, at the cost "
        "of a copy each step. GPU only; a no-op on CPU.",
    )
    vllm_max_model_length: int | None = _f(
        None,
        "Longest prompt + completion (tokens) the vLLM engine serves; None: the model's own "
        "limit. Lower it when the KV cache does not fit.",
    )
    vllm_max_lora_rank: int | None = _f(
        None,
        "Largest LoRA rank the vLLM engine accepts; None: model.lora_r. Must be >= model.lora_r.",
    )
    vllm_enforce_eager: bool = _f(
        False,
        "Run vLLM's model eagerly (no CUDA graphs / torch.compile): slower decode, faster "
        "start. Always eager on CPU.",
    )
    vllm_kv_cache_gb: float | None = _f(
        None,
        "KV cache size in GiB; None: vLLM's default (on CPU 4 GiB, or VLLM_CPU_KVCACHE_SPACE). "
        "On GPU it is taken from vllm_gpu_memory_utilization unless set here.",
    )


@dataclass
class DistributedConfig:
    backend: Literal["none", "ray"] = _f(
        "none",
        "'none': one process (the default; Ray is not needed). 'ray': a single controller runs "
        "the episodes and each policy is a group of Ray actors that generate and update "
        "data-parallel (needs: pip install 'teamrl[ray]'). See docs/distributed.md.",
    )
    address: str = _f(
        "local",
        "Ray cluster to join: 'local' starts a private one on this machine, 'auto' joins the "
        "cluster `ray start` set up on this node, or a head address 'host:port'.",
    )
    num_workers_per_policy: int = _f(
        1,
        "Ray actors per policy group (data-parallel replicas). 'shared'/'lora': one group for "
        "the whole team; 'separate': one group per agent.",
    )
    num_gpus_per_worker: float = _f(
        0.0, "GPUs each worker reserves (0 = CPU workers, gloo; > 0 = CUDA workers, NCCL)."
    )
    num_cpus_per_worker: float = _f(1.0, "CPUs each worker reserves (Ray's logical CPUs).")
    placement_strategy: Literal["PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"] = _f(
        "PACK",
        "Ray placement-group strategy of each policy group: 'PACK' keeps a group's workers on "
        "as few nodes as possible, 'STRICT_PACK' on one node, 'SPREAD' over as many nodes as "
        "possible, 'STRICT_SPREAD' each on its own node (a group of W workers needs W nodes).",
    )
    sharding: Literal["none", "fsdp"] = _f(
        "none",
        "'none': every worker of a policy group holds a full replica (data parallel). 'fsdp': "
        "FSDP2 (torch's fully_shard, per decoder layer, then the model) over the group's "
        "workers: parameters, gradients and optimizer states sharded, so a policy larger than "
        "one device trains on several; each worker generates from a full replica refreshed "
        "tensor by tensor after each update. Needs backend=ray. docs/distributed.md.",
    )
    fsdp_param_dtype: Literal["float32", "bfloat16"] = _f(
        "float32",
        "With sharding=fsdp: the dtype the sharded parameters compute in; 'bfloat16' keeps "
        "float32 master weights and reduces gradients in float32 (GPU only).",
    )
    cpu_mmap_threshold_kib: int | None = _f(
        None,
        "CPU workers only: allocations of at least this many KiB get their own mmap from "
        "glibc, given back on free, instead of a place in its heap (0 .. 32768). None: 128 on "
        "the CPU workers of a sharded group, whose per-layer gather and reduce buffers "
        "fragment glibc's heap (their memory grows every step otherwise; docs/distributed.md), "
        "glibc's adaptive threshold elsewhere. 0: glibc's adaptive "
        "threshold everywhere. teamrl/scale/cpu_malloc.py.",
    )
    gpu_memory_gb: float | None = _f(
        None,
        "Memory of one GPU of the cluster, in GiB: the preflight (and train --dry-run) then "
        "estimates each worker's weights, gradients, optimizer state and activations, with "
        "sharding where it is on, and refuses a placement that cannot fit. None: not checked.",
    )
    sandbox_tasks: bool = _f(
        True,
        "Under Ray, run sandboxed code (code rewards) as Ray tasks over the cluster's CPUs, "
        "with the same limits as in one process.",
    )
