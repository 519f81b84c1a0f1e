"""The ``hf`` backend: teamrl's own sampler over the trainer's live model, with its two loops
(the eager KV-cache loop of ``teamrl.generation.hf`` and the static-cache, compiled loop of
``teamrl.generation.fast_decode``) and the CPU prepacking of ``teamrl.generation.cpu_prepack``.

With ``generation.sampler_dtype=bfloat16`` on a model trained in another dtype, it samples from
a bfloat16 copy of the model instead, refreshed from the live weights after every optimizer
step (``weights_changed``: the stepped adapter's tensors, or every tensor of a full model). The
sampler's log-probs are then the copy's, which the update's importance-sampling correction
weighs against its own (``teamrl.update.importance``). The copy records the version of the
weights it took at each refresh (``served_version``, ``teamrl.generation.versions``), so a copy
left unrefreshed is seen as stale."""

from __future__ import annotations

import copy

import torch

from teamrl.generation import cpu_prepack as prepack
from teamrl.generation import fast_decode as static_loop
from teamrl.generation import hf as eager_loop
from teamrl.generation import multi_lora, versions
from teamrl.generation.types import EngineSpec, Generation, Request
from teamrl.tensors import is_adapter_param


class HFBackend:
    """Samples from ``spec.model`` itself, so it always sees the weights the trainer just
    stepped (``weights_changed`` has nothing to do), or from its copy in ``sampler_dtype``."""

    name = "hf"

    def __init__(
        self,
        spec: EngineSpec,
        fast_decode: str = "off",
        cpu_prepack: str = "off",
        compile: str = "auto",
        max_shapes: int = static_loop.MAX_SHAPES,
        graph: str = "auto",
        sampler_dtype: str = "model",
    ):
        self.spec = spec
        self.copy: torch.nn.Module | None = None  # the sampler's own weights, when it has them
        self.held: dict[str | None, int] = {}  # the copy's version of each part (versions.py)
        if sampler_dtype not in ("model", spec.dtype) and spec.model is not None:
            self.copy = sampler_copy(spec.model, getattr(torch, sampler_dtype))
            self.held = {p: versions.live(spec.model, p) for p in spec.adapters or [None]}
        if spec.adapters and spec.model is not None:  # the update's choice, for the sampler
            multi_lora.set_compute_dtype(self.model, spec.lora_compute_dtype)
        on_cuda = str(spec.device).startswith("cuda")
        # 'auto': the static cache where it was measured faster, on CUDA (its decode step
        # replays as CUDA graphs). On CPU, eager, it was not faster than the growing cache in a
        # process of its own, so CPU and other devices keep the reference loop.
        # fast_decode_compile=on asks for the fast path's compiled step, so it implies the path.
        # fast_decode_graph=on asks for the graphed step, which needs the path too.
        self.fast = (
            fast_decode == "on" or (fast_decode == "auto" and on_cuda) or "on" in (compile, graph)
        )
        # Compiled or graphed (on CUDA, one of them by default: the graph, which compiles
        # nothing); a compiled step captures its own graphs, so 'on' for compile wins.
        self.compile = compile == "on" or (compile == "auto" and on_cuda and graph == "off")
        self.graph = not self.compile and (graph == "on" or (graph == "auto" and on_cuda))
        self.max_shapes = max_shapes
        # 'auto' and 'on' both pack where it applies (fp32 on CPU, oneDNN present); 'on' says so
        # when it cannot (checked here, once, rather than silently per call).
        self.prepack = cpu_prepack != "off" and prepack.available() and prepack.eligible(self.model)
        if cpu_prepack == "on" and not self.prepack:
            from teamrl.errors import ConfigError

            raise ConfigError(
                "generation.cpu_prepack=on: needs a float32 model on CPU and PyTorch's oneDNN "
                f"linear operators (model on {spec.device}, sampled in "
                f"{str(self.model.dtype).removeprefix('torch.')}); use auto or off"
            )

    @property
    def model(self) -> torch.nn.Module:
        """The model the sampler runs: the live one, or its copy in the sampler's dtype."""
        return self.spec.model if self.copy is None else self.copy

    def generate(self, requests: list[Request], ignore_eos: bool = False) -> list[list[Generation]]:
        s = self.spec
        with prepack.prepacked(self.model, enabled=self.prepack):
            if self.fast:  # static KV cache + compiled decode; declines where unsupported
                return static_loop.generate(
                    self.model,
                    requests,
                    s.eos_ids,
                    s.pad_id,
                    ignore_eos,
                    self._decode,
                    compile=self.compile,
                    max_shapes=self.max_shapes,
                    graph=self.graph,
                )
            return eager_loop.generate(
                self.model, requests, s.eos_ids, s.pad_id, ignore_eos, self._decode
            )

    def _decode(self, ids: list[int]) -> str:
        return self.spec.tokenizer.decode(ids, skip_special_tokens=True)

    def weights_changed(self, adapter: str | None) -> None:
        """The live model is the sampler's model; a copy takes the stepped weights: those of
        LoRA adapter ``adapter`` (PEFT names them ``...lora_A.<adapter>.weight``), or all."""
        if self.copy is None:
            return
        live = dict(self.spec.model.named_parameters())
        with torch.no_grad():
            for name, param in self.copy.named_parameters():
                if adapter is None or is_adapter_param(name, adapter):
                    param.copy_(live[name])
        for part in [adapter] if adapter is not None else self.spec.adapters or [None]:
            self.held[part] = versions.live(self.spec.model, part)

    def served_version(self, adapter: str | None) -> int:
        """The live version when sampling from the live model; the copy's, as it was taken at
        the last ``weights_changed``, when sampling from a copy."""
        if self.copy is None:
            return versions.live(self.spec.model, adapter)
        return self.held.get(adapter, 0)


def sampler_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of ``model`` (its adapters included) in ``dtype``, for sampling only: eval mode,
    no gradients."""
    out = copy.deepcopy(model).to(dtype=dtype)
    out.eval()
    out.requires_grad_(False)
    return out
