"""The ``hf`` backend: teamrl's own sampler over the trainer's live model, with its two loops
(the eager KV-cache loop of ``teamrl.generation.hf`` and the static-cache, compiled loop of
``teamrl.generation.fast_decode``) and the CPU prepacking of ``teamrl.generation.cpu_prepack``."""

from __future__ import annotations

from teamrl.generation import cpu_prepack as prepack
from teamrl.generation import fast_decode as static_loop
from teamrl.generation import hf as eager_loop
from teamrl.generation import multi_lora
from teamrl.generation.types import EngineSpec, Generation, Request


class HFBackend:
    """Samples from ``spec.model`` itself, so it always sees the weights the trainer just
    stepped: ``weights_changed`` has nothing to do."""

    name = "hf"

    def __init__(
        self,
        spec: EngineSpec,
        fast_decode: str = "off",
        cpu_prepack: str = "off",
        compile: str = "auto",
        max_shapes: int = static_loop.MAX_SHAPES,
    ):
        self.spec = spec
        if spec.adapters and spec.model is not None:  # the update's choice, for the sampler
            multi_lora.set_compute_dtype(spec.model, spec.lora_compute_dtype)
        on_cuda = str(spec.device).startswith("cuda")
        # 'auto': the static cache where it was measured faster, on CUDA (its decode step
        # replays as CUDA graphs). On CPU, eager, it was not faster than the growing cache in a
        # process of its own, so CPU and other devices keep the reference loop.
        # fast_decode_compile=on asks for the fast path's compiled step, so it implies the path.
        self.fast = fast_decode == "on" or (fast_decode == "auto" and on_cuda) or compile == "on"
        self.compile = compile == "on" or (compile == "auto" and on_cuda)
        self.max_shapes = max_shapes
        # 'auto' and 'on' both pack where it applies (fp32 on CPU, oneDNN present); 'on' says so
        # when it cannot (checked here, once, rather than silently per call).
        self.prepack = cpu_prepack != "off" and prepack.available() and prepack.eligible(spec.model)
        if cpu_prepack == "on" and not self.prepack:
            from teamrl.errors import ConfigError

            raise ConfigError(
                "generation.cpu_prepack=on: needs a float32 model on CPU and PyTorch's oneDNN "
                f"linear operators (model on {spec.device}, dtype {spec.dtype}); use auto or off"
            )

    def generate(self, requests: list[Request], ignore_eos: bool = False) -> list[list[Generation]]:
        s = self.spec
        with prepack.prepacked(s.model, enabled=self.prepack):
            if self.fast:  # static KV cache + compiled decode; declines where unsupported
                return static_loop.generate(
                    s.model,
                    requests,
                    s.eos_ids,
                    s.pad_id,
                    ignore_eos,
                    self._decode,
                    compile=self.compile,
                    max_shapes=self.max_shapes,
                )
            return eager_loop.generate(
                s.model, requests, s.eos_ids, s.pad_id, ignore_eos, self._decode
            )

    def _decode(self, ids: list[int]) -> str:
        return self.spec.tokenizer.decode(ids, skip_special_tokens=True)

    def weights_changed(self, adapter: str | None) -> None:
        pass  # the live model is the sampler's model
