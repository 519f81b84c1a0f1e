"""Agents → policies.

- ``shared``: one model serves every role (role prompts tell them apart).
- ``lora``: one frozen base and one LoRA adapter per agent; generation is one batched call
  across adapters (PEFT mixed-adapter batches); the update runs one adapter at a time, or every
  agent's adapter in one forward/backward with ``train.one_pass_lora`` (``teamrl.update.joint``,
  at the memory of every agent's micro-batch at once).
- ``separate``: one model per agent; the models may differ (heterogeneous teams).

A ``Policy`` is the unit that owns trainable parameters and an optimizer. An ``Engine`` is a
model object that generates: several policies share one engine in ``lora`` mode.
The KL reference is the base with adapters disabled when LoRA is in use, else a frozen copy,
and it is only built when ``beta > 0``.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from teamrl.config import AgentConfig, Config, ConfigError
from teamrl.envs.base import check_observation
from teamrl.generation import (
    Backend,
    EngineSpec,
    Generation,
    Request,
    make_backend,
    stop_end,
    stop_floor,
)
from teamrl.team.models import load_model, load_tokenizer, resolve
from teamrl.tensors import is_adapter_param

FEATURE_CHUNK = 16  # sequences per forward of ``Policy.hidden_at``


@dataclass
class Engine:
    model: torch.nn.Module
    tokenizer: object
    eos_ids: list[int]
    pad_id: int
    model_path: str = ""  # the base weights' local folder or hub id (what a backend loads)
    backend: Backend | None = None  # built once the model holds its adapters


@dataclass
class Policy:
    name: str
    engine: Engine
    adapter: str | None = None  # LoRA adapter name inside engine.model, if any
    ref_model: torch.nn.Module | None = None  # frozen copy for KL (full fine-tuning only)
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    agents: list[str] = field(default_factory=list)
    sharded: bool = False  # FSDP2 over its Ray worker group (teamrl.scale.sharding)
    # False: the weights and the optimizer live in this process. A Ray policy
    # (teamrl.scale.group.RemotePolicy) has the same fields and methods with True.
    on_workers: ClassVar[bool] = False

    @property
    def model(self) -> torch.nn.Module:
        return self.engine.model

    def parameters(self) -> list[torch.nn.Parameter]:
        if self.adapter is None:
            return [p for p in self.model.parameters() if p.requires_grad]
        return [p for n, p in self.model.named_parameters() if is_adapter_param(n, self.adapter)]

    def activate(self) -> None:
        """Make this policy's adapter the active, trainable one."""
        if self.adapter is not None:
            self.model.set_adapter(self.adapter)

    @contextmanager
    def reference(self):
        """Context yielding the model to compute reference log-probs with."""
        if self.adapter is not None:
            with self.model.disable_adapter():
                yield self.model
        elif self.ref_model is not None:
            yield self.ref_model
        else:
            raise RuntimeError(f"policy {self.name!r} has no reference model (beta == 0?)")

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The trainable weights only (an adapter, or the full model)."""
        if self.adapter is None:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(self.model, adapter_name=self.adapter)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if self.adapter is None:
            self.model.load_state_dict(state)
            return
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.model, state, adapter_name=self.adapter)

    @torch.no_grad()
    def hidden_at(
        self, jobs: list[tuple[list[int], list[int]]], device: torch.device
    ) -> list[torch.Tensor]:
        """For each (token ids, positions): the policy's last hidden state at those positions,
        (len(positions), H) float32: what the critics' value heads read (teamrl.credit.critics).
        Right-padded batches: a causal model's real positions never see the pads after them."""
        self.activate()
        model, pad = self.model, self.engine.pad_id
        was_training = model.training
        model.eval()  # no dropout in the features
        out: list[torch.Tensor] = []
        try:
            for i in range(0, len(jobs), FEATURE_CHUNK):
                part = jobs[i : i + FEATURE_CHUNK]
                width = max(len(ids) for ids, _ in part)
                ids = torch.full((len(part), width), pad, dtype=torch.long)
                mask = torch.zeros((len(part), width), dtype=torch.long)
                for r, (seq, _) in enumerate(part):
                    ids[r, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                    mask[r, : len(seq)] = 1
                res = model(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    output_hidden_states=True,
                    use_cache=False,
                    logits_to_keep=1,  # the values need no vocabulary projection
                )
                h = res.hidden_states[-1].float()
                out.extend(h[r, pos] for r, (_, pos) in enumerate(part))
        finally:
            model.train(was_training)
        return out

    def save_weights(self, folder) -> None:
        """Its trainable weights as standard files (a PEFT adapter or a save_pretrained model)."""
        from teamrl.team.weights import save_local_weights

        save_local_weights(self, folder)

    def load_weights(self, folder) -> None:
        """Load what ``save_weights`` wrote."""
        from teamrl.team.weights import load_local_weights

        load_local_weights(self, folder)


class Team:
    """The agents of a run and the policies they map to."""

    def __init__(
        self, cfg: Config, role_prompts: dict[str, str] | None = None, load_models: bool = True
    ):
        """``load_models=False``: tokenizers and the agent → policy map only, no weights (the
        Ray controller, whose models live on worker groups: ``teamrl.scale``)."""
        self.cfg = cfg
        self.load_models = load_models
        self.agents: dict[str, AgentConfig] = {a.name: a for a in cfg.team.agents}
        self.systems = {
            a.name: (a.system if a.system is not None else (role_prompts or {}).get(a.name, ""))
            for a in cfg.team.agents
        }
        self.device = resolve_device(cfg.model.device)
        self.policies: dict[str, Policy] = {}
        self.policy_of: dict[str, str] = {}
        # asynchronous training: the team whose optimizers train the weights this one samples
        # with (teamrl.execution.asynchronous), so a reply's staleness counts from theirs;
        # None: this team's own optimizers (teamrl.apps.provenance)
        self.learner: Team | None = None
        build = {"shared": self._build_shared, "lora": self._build_lora}
        build.get(cfg.team.policies, self._build_separate)()
        if not load_models:
            return
        for pol in self.policies.values():
            if cfg.algorithm.beta > 0 and pol.adapter is None:
                pol.ref_model = copy.deepcopy(pol.model).eval().requires_grad_(False)
            if cfg.model.gradient_checkpointing:
                pol.model.gradient_checkpointing_enable()
        for engine in self.engines():
            engine.backend = make_backend(cfg.generation, self.engine_spec(engine))

    # --- construction -----------------------------------------------------------------------

    def _engine(self, name_or_path: str) -> Engine:
        tok = load_tokenizer(name_or_path)
        if not self.load_models:  # eos_ids beyond the tokenizer's come from the workers
            eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
            return Engine(None, tok, eos, tok.pad_token_id, model_path=name_or_path)
        model = load_model(name_or_path, self.cfg.model.dtype, str(self.device), self.cfg.seed)
        eos = {tok.eos_token_id}
        gen_eos = model.generation_config.eos_token_id
        eos.update(
            gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else []
        )
        eos.discard(None)
        return Engine(
            model=model,
            tokenizer=tok,
            eos_ids=sorted(eos),
            pad_id=tok.pad_token_id,
            model_path=resolve(name_or_path, self.cfg.seed),
        )

    def engine_spec(self, engine: Engine) -> EngineSpec:
        """What the engine's generation backend is told about it."""
        m = self.cfg.model
        adapters = [p.adapter for p in self.policies.values() if p.engine is engine and p.adapter]
        return EngineSpec(
            model=engine.model,
            tokenizer=engine.tokenizer,
            eos_ids=engine.eos_ids,
            pad_id=engine.pad_id,
            model_path=engine.model_path,
            dtype=m.dtype,
            device=str(self.device),
            adapters=adapters,
            lora_r=m.lora_r if adapters else 0,
            lora_alpha=m.lora_alpha if adapters else 0,
            lora_target_modules=list(m.lora_target_modules) if adapters else [],
            lora_compute_dtype=m.lora_compute_dtype,
        )

    def _lora_config(self):
        from peft import LoraConfig

        m = self.cfg.model
        return LoraConfig(
            r=m.lora_r,
            lora_alpha=m.lora_alpha,
            lora_dropout=m.lora_dropout,
            target_modules=list(m.lora_target_modules),
            task_type="CAUSAL_LM",
        )

    def _add_adapters(self, engine: Engine, names: list[str]) -> None:
        from peft import get_peft_model

        if engine.model is None:  # no weights here (load_models=False)
            return
        torch.manual_seed(self.cfg.seed)
        engine.model = get_peft_model(engine.model, self._lora_config(), adapter_name=names[0])
        for name in names[1:]:
            engine.model.add_adapter(name, self._lora_config())
        # PEFT freezes all but the active adapter; every adapter is trained (one at a time).
        for n, p in engine.model.named_parameters():
            p.requires_grad_(any(is_adapter_param(n, a) for a in names))

    def _build_shared(self) -> None:
        engine = self._engine(self.cfg.model.name_or_path)
        adapter = None
        if self.cfg.model.use_peft:
            self._add_adapters(engine, ["shared"])
            adapter = "shared"
        self.policies["shared"] = Policy("shared", engine, adapter, agents=list(self.agents))
        self.policy_of = {a: "shared" for a in self.agents}

    def _build_lora(self) -> None:
        engine = self._engine(self.cfg.model.name_or_path)
        names = list(self.agents)
        self._add_adapters(engine, names)
        for a in names:
            self.policies[a] = Policy(a, engine, adapter=a, agents=[a])
            self.policy_of[a] = a

    def _build_separate(self) -> None:
        for a, acfg in self.agents.items():
            engine = self._engine(acfg.model or self.cfg.model.name_or_path)
            adapter = None
            if self.cfg.model.use_peft:
                self._add_adapters(engine, [a])
                adapter = a
            self.policies[a] = Policy(a, engine, adapter, agents=[a])
            self.policy_of[a] = a

    # --- prompting and generation -------------------------------------------------------------

    def engine_of(self, agent: str) -> Engine:
        return self.policies[self.policy_of[agent]].engine

    def encode_prompt(self, agent: str, observation: str, example: dict | None = None) -> list[int]:
        acfg = self.agents[agent]
        check_observation(agent, observation, "the env")  # any env, any rollout: never "None"
        try:
            user = acfg.prompt.format_map({**(example or {}), "observation": observation})
        except (KeyError, IndexError, ValueError) as err:
            fields = ", ".join(sorted(map(str, example or {})))  # preflight names the row index
            raise ConfigError(
                f"team.agents[{agent}].prompt: cannot fill template {acfg.prompt!r}: {err!r} "
                f"(the dataset row's fields: {fields or 'none'})"
            ) from err
        system = self.systems[agent]
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}
        ]
        return self.encode_messages(agent, msgs)

    def encode_messages(
        self,
        agent: str,
        messages: list[dict[str, Any]],
        tools: list[dict] | None = None,
        prefill: str = "",
    ) -> list[int]:
        """The prompt ids of a chat (``[{"role", "content"}, ...]``) for ``agent``: the
        tokenizer's chat template with the generation prompt (without a template, or with
        ``team.chat_template`` off, the contents joined by blank lines), then the agent's
        ``response_prefix``. The env's prompts and the app endpoint's calls both come here, so
        the ids a sample records are the ones its update scores. ``tools``: function tools
        for a template that renders them (the endpoint's, ``teamrl.apps.tools``); ``prefill``:
        text written after the response_prefix (the endpoint's forced tool-call opening)."""
        tok = self.engine_of(agent).tokenizer
        if self.cfg.team.chat_template and getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True
            )
        else:
            text = "\n\n".join(m["content"] for m in messages) + "\n"
        text += self.agents[agent].response_prefix + prefill
        return tok(text, add_special_tokens=False)["input_ids"]

    def request(self, agent: str, prompt_ids: list[int], n: int, greedy: bool = False) -> Request:
        a = self.agents[agent]
        pol = self.policies[self.policy_of[agent]]
        return Request(
            prompt_ids=prompt_ids,
            n=n,
            temperature=0.0 if greedy else a.temperature,
            top_p=a.top_p,
            top_k=a.top_k,
            max_new_tokens=a.max_completion_length,
            adapter=pol.adapter,
            stop=tuple(a.stop),
            min_new_tokens=a.min_completion_length,
        )

    def generate(
        self, jobs: list[tuple[str, Request]], ignore_eos: bool = False
    ) -> list[list[Generation]]:
        """Run ``(agent, request)`` jobs with one batched backend call per engine."""
        by_engine: dict[int, list[int]] = {}
        for i, (agent, _) in enumerate(jobs):
            by_engine.setdefault(id(self.engine_of(agent)), []).append(i)
        results: list[list[Generation]] = [[] for _ in jobs]
        for idxs in by_engine.values():
            engine = self.engine_of(jobs[idxs[0]][0])
            outs = engine.backend.generate([jobs[i][1] for i in idxs], ignore_eos)
            for i, out in zip(idxs, outs):
                results[i] = out
        return results

    def decode(
        self,
        agent: str,
        ids: list[int],
        prefill: str = "",
        min_new_tokens: int | None = None,
        stops: tuple[str, ...] = (),
    ) -> str:
        """The agent's reply as the env sees it: its response_prefix (and ``prefill``, as
        ``encode_messages`` wrote it), then the completion.

        A completion ended by a stop string ends, as text, with that string: the token that
        completed it may carry more characters (``'])`` then ``.`` in one token ``]).``), which
        the env never sees (vLLM's text with ``include_stop_str_in_output``). The trained tokens
        stay the sampled ones; only what the env reads is cut. A stop string written within
        the agent's ``min_completion_length`` (or the request's ``min_new_tokens``, where the
        caller lowered it) did not end the completion, so it is not where the text is cut.
        ``stops``: a request's stop strings besides the agent's, cut at the same way."""
        tok = self.engine_of(agent).tokenizer
        text = tok.decode(ids, skip_special_tokens=True)
        a = self.agents[agent]

        def decode(part: list[int]) -> str:
            return tok.decode(part, skip_special_tokens=True)

        least = a.min_completion_length if min_new_tokens is None else min_new_tokens
        floor = stop_floor(decode, ids, least)
        return a.response_prefix + prefill + cut_at_stop(text, (*a.stop, *stops), floor)

    def engines(self) -> list[Engine]:
        seen: dict[int, Engine] = {}
        for pol in self.policies.values():
            seen.setdefault(id(pol.engine), pol.engine)
        return list(seen.values())


def cut_at_stop(text: str, stops, floor: int = 0) -> str:
    """``text`` through the end of the earliest stop string in it that ends past character
    ``floor`` (unchanged if none does).

    Generation ends at the first token after which the text holds a stop string, so the
    earliest end of any occurrence is where the reply ended; ``floor`` is the text of the
    tokens before the agent's ``min_completion_length`` (``teamrl.generation.hf.stop_floor``),
    where a stop string did not end it."""
    end = stop_end(text, stops, floor)
    return text if end is None else text[:end]


def resolve_device(name: str) -> torch.device:
    """``model.device`` as a torch device ('auto': CUDA when there is one)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
