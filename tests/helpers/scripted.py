"""A scripted sampler for the endpoint tests: a tiny random model never writes a tool call, so
the engine's backend answers each request with the next scripted text's tokens, then EOS, as a
sampler would; with ``cut``, a text longer than the request's token limit is cut there and
marked truncated. Log-probs are distinct per token (-0.5, -0.75, ...), so a test can follow
them from the sampler to the reply."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from teamrl.generation.types import Generation

# A function tool in the chat-completions shape, and a reply calling it in Qwen2.5's format
# (the tiny agents' chat template).
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
CALL_ADD = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


class ScriptedBackend:
    """Wraps an engine's backend; ``script``: the replies to hand out, in order."""

    def __init__(self, inner, tokenizer, eos: int):
        self.inner, self.tok, self.eos = inner, tokenizer, eos
        self.script: list[str] = []
        self.cut = False  # cut at the request's max_new_tokens (the tiny agents allow 6)
        self.sampled: list[list[int]] = []  # every completion handed out, in order
        self.requests: list = []  # every request answered from the script, in order

    def generate(self, requests, ignore_eos=False):
        out = []
        for r in requests:
            if not self.script:  # the script is spent: the real sampler answers
                out.extend(self.inner.generate([r], ignore_eos))
                continue
            self.requests.append(r)
            ids = self.tok(self.script.pop(0), add_special_tokens=False)["input_ids"]
            # as the sampler: the reply ends at the token that completes a stop string
            end = next(
                (n for n in range(1, len(ids) + 1) if any(s in self.tok.decode(ids[:n]) for s in r.stop)),
                None,
            )  # fmt: skip
            cut = self.cut and (end or len(ids)) >= r.max_new_tokens
            if end is not None and not cut:
                ids = ids[:end]
            else:
                ids = ids[: r.max_new_tokens] if cut else ids + [self.eos]
            logprobs = [-0.5 - 0.25 * j for j in range(len(ids))]
            out.append([Generation(list(r.prompt_ids), ids, logprobs, cut)])
        self.sampled += [gens[0].completion_ids for gens in out]
        return out

    def weights_changed(self, adapter):
        self.inner.weights_changed(adapter)


@contextmanager
def scripted_backend(team) -> Iterator[ScriptedBackend]:
    """The team's one engine (LoRA agents share it) answering from a script while it lasts."""
    (engine,) = team.engines()
    real = engine.backend
    engine.backend = ScriptedBackend(real, engine.tokenizer, engine.eos_ids[0])
    try:
        yield engine.backend
    finally:
        engine.backend = real
