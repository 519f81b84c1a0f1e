"""Typed run configuration: YAML plus ``key=value`` overrides, validated with clear errors.

Every field carries a help string (``teamrl train --help-config`` prints them all) and every
default lives here, in one place. Names follow TRL where the idea is the same
(``num_generations``, ``max_completion_length``, ``temperature``, ``top_p``, ``beta``,
``epsilon``, ``num_iterations``, ``loss_type``, ``scale_rewards``, ``learning_rate``...).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from teamrl.config.algorithm import AlgorithmConfig
from teamrl.config.endpoint import EndpointConfig
from teamrl.config.engines import DistributedConfig, GenerationConfig
from teamrl.config.fields import _f
from teamrl.config.rules import check_max_turns, validate_config
from teamrl.config.run import EvalConfig, LogConfig
from teamrl.config.yaml_file import YamlProblem, load_mapping
from teamrl.errors import ConfigError, did_you_mean

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "DistributedConfig",
    "EndpointConfig",
    "EvalConfig",
    "GenerationConfig",
    "LogConfig",
    "check_max_turns",
]  # re-exported: every caller imports them from here


@dataclass
class ModelConfig:
    name_or_path: str = _f(
        "smollm2-135m",
        "Base model: a builtin ('smollm2-135m', 'tiny-llama', 'tiny-qwen2', 'tiny-llama-wide'), "
        "a Hugging Face id, or a local folder.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = _f("float32", "Weights dtype.")
    use_peft: bool = _f(
        False,
        "Train LoRA adapters instead of full weights for 'shared'/'separate' policies "
        "('lora' policies always use LoRA).",
    )
    lora_r: int = _f(16, "LoRA rank.")
    lora_alpha: int = _f(32, "LoRA scaling alpha.")
    lora_dropout: float = _f(0.0, "LoRA dropout.")
    lora_target_modules: list[str] = _f(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "Module names that get LoRA adapters.",
    )
    lora_compute_dtype: Literal["model", "adapter"] = _f(
        "model",
        "Dtype of the LoRA branch s B A x where teamrl computes it (the update's fused and "
        "one-pass forwards, grouped sampling). PEFT keeps float32 adapters on a bfloat16/"
        "float16 model; 'model' casts A and B to the model's dtype for the products (bf16 "
        "autocast: no float32 pass over each layer's output, gradients cast back, the "
        "optimizer stepping the float32 weights); 'adapter' computes the branch in float32 and "
        "sums it with the base output before rounding, as PEFT does. Identical on a float32 "
        "model.",
    )
    gradient_checkpointing: bool = _f(False, "Recompute activations in backward to save memory.")
    device: str = _f("auto", "'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:1'...")


@dataclass
class AgentConfig:
    name: str = _f(help="Role name, e.g. 'concise' or 'coder'. Must match the env's agent names.")
    system: str | None = _f(
        None, "Role (system) prompt. None takes the task's default role prompt, '' disables it."
    )
    prompt: str = _f(
        "{observation}",
        "User-message template. '{observation}' is the env's observation; any field of the "
        "dataset example may be used too, e.g. '{question}'. Fields are plain names: no "
        "attribute or index access ('{x.y}', '{x[0]}'), conversion or format spec.",
    )
    model: str | None = _f(
        None, "Per-agent model for policies='separate' (heterogeneous teams). None uses model."
    )
    temperature: float = _f(
        1.0,
        "Sampling temperature (0 = greedy, only without training: G greedy samples are "
        "identical, so every group would be flat).",
    )
    top_p: float = _f(1.0, "Nucleus sampling mass.")
    top_k: int = _f(0, "Top-k sampling (0 = off).")
    max_completion_length: int = _f(64, "Maximum new tokens per completion.")
    min_completion_length: int = _f(
        0,
        "Fewest new tokens per completion (vLLM's min_tokens, HF's min_new_tokens): before "
        "it, EOS is never drawn and a stop string does not end the completion (nor cut what "
        "the env reads). For writers whose first line can be a title or a heading followed by "
        "a stop string such as '\n\n'. 0: off; at most max_completion_length.",
    )
    stop: list[str] = _f(
        [],
        "Strings that end a completion as EOS does (vLLM's and TRL's stop): generation stops at "
        "the token that completes one, which is kept, and the completion counts as finished, not "
        "truncated. The env reads the reply through the stop string only (as vLLM's output "
        "text), even when that token carries more characters. Matched in the completion's text only (not the prompt or response_prefix). "
        "For answers whose format has a known end, e.g. [']'] after a '#### [' prefill: tokens "
        "after the answer would carry its advantage without acting.",
    )
    response_prefix: str = _f(
        "",
        "Text the agent's reply starts with (an assistant prefill), e.g. '#### ['. It ends the "
        "prompt, so it is never trained on; the env sees prefix + completion. Pins a small "
        "model to an answer format.",
    )
    learning_rate: float | None = _f(
        None,
        "Per-agent peak LR (None = train.learning_rate); agents of one shared policy must agree.",
    )
    num_iterations: int | None = _f(
        None,
        "Per-agent mu (None = algorithm.num_iterations); agents of one shared policy must agree.",
    )


@dataclass
class TeamConfig:
    policies: Literal["shared", "lora", "separate"] = _f(
        "lora",
        "'shared': one model serves every role; 'lora': one frozen base with one LoRA adapter "
        "per agent, generated in one batched call; 'separate': one model per agent.",
    )
    agents: list[AgentConfig] = _f(
        [],
        "The team, in the env's agent order. Empty: one agent per agent of the task, with every "
        "per-agent setting at its default.",
    )
    chat_template: bool = _f(True, "Apply the tokenizer's chat template when it has one.")
    ignore_eos: bool = _f(
        False, "Always generate max_completion_length tokens (benchmarks with equal lengths)."
    )


@dataclass
class EnvConfig:
    name: str | None = _f(
        None,
        "Registered task name (see `teamrl envs`). None: the task object passed in Python "
        "(Trainer(cfg, task=...)), whose name the run then records; the command line needs one.",
    )
    kwargs: dict[str, Any] = _f({}, "Keyword arguments for the task builder.")
    max_turns: int = _f(
        1,
        "Turns per episode (the tree depth for MAGRPO). Passed to task builders that take a "
        "'max_turns' argument; env.kwargs.max_turns, if given, must equal it.",
    )
    turn_order: list[str] | None = _f(
        None,
        "Run a simultaneous-turn task sequentially in this agent order (AT-GRPO/GRPO on writing "
        "or helper/main coding); non-final agents are scored by a one-sample lookahead.",
    )
    reward_workers: int = _f(
        1, "Threads that step env copies (and so compute rewards) in parallel."
    )
    step_timeout: float = _f(
        300.0,
        "Seconds one env step (its transition and reward) may take; a step past it ends its "
        "episode as failed with reward 0, counted as episodes/timeouts. 0: no limit.",
    )
    sandbox_isolation: Literal["auto", "namespaces", "userns", "landlock", "setuid", "rlimits"] = (
        _f(
            "auto",
            "How model-written programs are fenced off: 'auto' picks the strongest mode the "
            "machine allows ('namespaces' as root, 'userns' otherwise, 'landlock' for root "
            "without CAP_SYS_ADMIN) and never a weak one; 'setuid' (root) and 'rlimits' (the "
            "program runs as your user) are weak opt-in modes that leave writes and the network "
            "open, see docs/sandbox.md.",
        )
    )
    sandbox_disk_mb: int = _f(
        64,
        "MiB a model-written program may keep in its working directory, all files together "
        "(a tmpfs of that size with namespaces, else a watcher kills it past the bound); a "
        "program past it fails alone, killed='disk_limit'.",
    )
    sandbox_disk_files: int = _f(
        1024,
        "Files and folders a model-written program may keep in its working directory "
        "(tmpfs nr_inodes, or the watcher's count); past it the program fails alone.",
    )


@dataclass
class TrainConfig:
    max_steps: int = _f(100, "Training steps (one rollout + update per step).")
    prompts_per_step: int = _f(1, "Dataset examples (tree roots) per step.")
    num_mini_batches: int = _f(
        1,
        "Optimizer steps per policy per iteration: the policy's samples are split this many ways.",
    )
    micro_batch_size: int | None = _f(
        None,
        "Sequences per forward pass (gradient accumulation), >= 1. None = the whole minibatch.",
    )
    max_tokens_per_micro_batch: int | None = _f(
        None,
        "Token budget of one forward pass of the update, >= 1: a minibatch is cut into chunks "
        "(one prompt's samples kept together) whose forward runs at most this many tokens: "
        "with padding_free, the distinct prompts' tokens + the completions' tokens; padded, "
        "distinct prompts x longest prompt + samples x longest completion (samples x "
        "(prompt + completion) under gradient checkpointing). Bounds the update's activation "
        "memory when prompts grow over the turns; a longer sample runs alone. The gradient "
        "equals the uncut one (bnpo, a per-chunk mean, excepted). None = no token budget.",
    )
    padding_free: bool = _f(
        True,
        "Run each forward of the update as one packed row with no pad position (TRL's name): "
        "every distinct prompt once, then the completions that continue it, position ids "
        "restarting per prompt, attention restricted to each sequence's own tokens "
        "(teamrl.update.packing; flash-attention's variable-length kernel on CUDA). The same "
        "gradients as the padded forward; False left-pads prompts and right-pads completions.",
    )
    optim: Literal["adamw_torch", "sgd"] = _f(
        "adamw_torch",
        "Optimizer (TRL/transformers names): 'adamw_torch' (AdamW), or 'sgd' (plain SGD, no "
        "momentum: the update is -lr * gradient, which the exactness tests compare).",
    )
    learning_rate: float = _f(1e-5, "Peak learning rate of the optimizer.")
    weight_decay: float = _f(0.0, "Decoupled weight decay (AdamW), or L2 weight decay (SGD).")
    adam_beta1: float = _f(0.9, "AdamW beta1.")
    adam_beta2: float = _f(0.999, "AdamW beta2.")
    warmup_steps: int = _f(0, "Linear warmup steps.")
    lr_scheduler_type: Literal["cosine", "constant", "linear"] = _f(
        "cosine", "Schedule after warmup."
    )
    min_lr_ratio: float = _f(
        0.0, "Final LR as a fraction of the peak, in [0, 1] (cosine and linear)."
    )
    max_grad_norm: float | None = _f(1.0, "Gradient clipping norm, > 0 (None = off).")
    shuffle: bool = _f(True, "Shuffle the training data every epoch.")
    nan_policy: Literal["error", "skip"] = _f(
        "error", "On a NaN/Inf loss: raise, or skip that update and count it in 'nan_skips'."
    )
    fused_lora: bool = _f(
        True,
        "In the update, run each plain LoRA linear (one active adapter, no dropout or DoRA; "
        "fp32 adapters on a bf16 model included) as one autograd node, y = W x + s B A x with "
        "its backward written out, instead of PEFT's five ops (teamrl.update.lora_linear). "
        "The same function; False runs PEFT's forward.",
    )
    bf16: bool = _f(
        False,
        "Mixed precision for the update (TrainingArguments' name) on a float32 model with "
        "LoRA adapters: each adapted linear's products in bfloat16 on a bf16 copy of its "
        "frozen base weight (inputs and incoming gradients rounded to bf16 at the layer, "
        "float32 accumulation), the residual stream, norms, attention, logits, adapters and "
        "optimizer in float32 (teamrl.update.lora_linear). Sampling stays float32, so the "
        "importance-sampling correction turns on (algorithm.importance_sampling_correction "
        "auto). Faster where the CPU multiplies bf16 natively (AVX512-BF16, AMX); costs half "
        "the adapted weights' float32 bytes of memory. Needs model.dtype=float32, "
        "team.policies=lora or model.use_peft, train.fused_lora and not one_pass_lora.",
    )
    one_pass_lora: bool = _f(
        False,
        "team.policies=lora: update every agent's adapter in one forward/backward over all "
        "their samples, each row through its own adapter, each adapter stepping on its own "
        "gradients with its own LR and num_iterations (teamrl.update.joint). Where it cannot "
        "apply (sharding, data parallel, gradient checkpointing, DoRA, dropout, per-agent "
        "settings that differ) the agents update one after the other, said once in a warning. "
        "Agents' chunks share a forward only within one forward's bounds (micro_batch_size, "
        "max_tokens_per_micro_batch; with neither set, the per-agent path's largest forward), "
        "so it needs no more activation memory; it saves forwards where chunks are smaller "
        "than the bounds. Off by default: its speed at equal memory is not yet measured "
        "(docs/performance.md).",
    )


@dataclass
class Config:
    run_name: str = _f("run", "Run folder name under log.output_dir.")
    seed: int = _f(0, "Seed for data order, sampling and initialisation.")
    model: ModelConfig = _f(default_factory=ModelConfig, help="Base model.")
    team: TeamConfig = _f(default_factory=TeamConfig, help="Agents and policies.")
    env: EnvConfig = _f(default_factory=EnvConfig, help="Task.")
    algorithm: AlgorithmConfig = _f(default_factory=AlgorithmConfig, help="Algorithm.")
    train: TrainConfig = _f(default_factory=TrainConfig, help="Optimisation.")
    eval: EvalConfig = _f(default_factory=EvalConfig, help="Evaluation.")
    log: LogConfig = _f(default_factory=LogConfig, help="Outputs and checkpoints.")
    generation: GenerationConfig = _f(default_factory=GenerationConfig, help="Generation backend.")
    distributed: DistributedConfig = _f(
        default_factory=DistributedConfig, help="Processes and placement (one process, or Ray)."
    )
    endpoint: EndpointConfig = _f(
        default_factory=EndpointConfig,
        help="The app endpoint's limits under load (algorithm.name=app).",
    )

    def validate(self) -> Config:
        """Every field's range and the checks that relate several fields
        (``teamrl.config.rules``); each error names the field path and the value."""
        validate_config(self)
        return self


# ---------------------------------------------------------------------------------------------
# Building dataclasses from plain dicts, with errors that name the dotted field.


def agent_setting(cfg: Config, agents: list[str], name: str, default):
    """A per-agent override (``team.agents[i].<name>``) for a policy serving ``agents``, else
    ``default``. Config.validate refuses a shared policy whose agents set different values."""
    values = [ag.__dict__[name] for ag in cfg.team.agents if ag.name in agents]
    return next((v for v in values if v is not None), default)


def from_dict(cls: type, data: dict, where: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        path = f"{where}.{unknown[0]}" if where else unknown[0]
        hint = did_you_mean(unknown[0], fields, f"{where}." if where else "")
        valid = f"valid keys here: {', '.join(sorted(fields))}"
        raise ConfigError(f"{path}: unknown key; {hint + ' ' if hint else ''}{valid}")
    kwargs = {}
    for name, value in data.items():
        path = f"{where}.{name}" if where else name
        kwargs[name] = _coerce(hints[name], value, path)
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        path = f"{where}.{missing[0]}" if where else missing[0]
        raise ConfigError(f"{path}: required field is missing")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, path)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{path}: got {value!r}")
    if origin is Literal:
        if isinstance(value, bool) and {"on", "off"} <= set(args):
            value = "on" if value else "off"  # YAML 1.1 reads a bare on/off as a boolean
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            raise ConfigError(f"{path}: expected one of {choices}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        return [_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected a bool, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an int, got {value!r}")
        return value
    if tp is float:
        number = value
        if isinstance(value, str):  # YAML 1.1 reads "1e-6" (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ConfigError(f"{path}: expected a float, got {value!r}")
        try:
            number = float(number)
        except OverflowError:  # an int too large for a float
            number = math.inf
        if not math.isfinite(number):  # .inf / .nan would train NaN weights
            raise ConfigError(f"{path}: expected a finite float, got {value!r}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{path}: unsupported type {tp}")


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


# What load_config and apply_overrides take as overrides.
Overrides = list[str] | tuple[str, ...] | str | Mapping[str, Any] | None


def apply_overrides(data: dict, overrides: Overrides) -> dict:
    """Apply ``a.b.c=value`` overrides; values are parsed as YAML (``3``, ``true``, ``[a, b]``).

    ``overrides`` is a list of ``key=value`` strings, one such string, or a mapping of dotted
    keys to values (``{"train.max_steps": 10}``: the values are taken as they are, not parsed).
    A numeric part indexes a list (``team.agents.1.temperature=0.5``). Every mistake is a
    ConfigError naming the override: a missing ``=``, an empty key part, a value that is not
    YAML, an index out of range (with the list's length), or a path through a non-section.
    """
    for key, value, item in _override_items(overrides):
        parts = key.split(".")
        if not all(parts):
            raise ConfigError(f"override {item!r}: malformed key {key!r}")
        node: Any = data
        for depth, part in enumerate(parts):
            where = ".".join(parts[: depth + 1])
            last = depth == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit():
                    raise ConfigError(f"override {key}: {where} indexes a list; expected a number")
                index = int(part)
                if index >= len(node):
                    parent = ".".join(parts[:depth])
                    raise ConfigError(
                        f"override {key}: index {index} out of range ({parent} has "
                        f"{len(node)} entries; indices 0..{len(node) - 1})"
                        if node
                        else f"override {key}: index {index} out of range ({parent} is empty; "
                        f"set the whole list, e.g. {parent}=[...])"
                    )
                if last:
                    node[index] = value
                else:
                    node = node[index]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                    continue
                if node.get(part) is None:  # absent, or a `key:` left empty in the YAML
                    if part.isdigit():  # a list field (team.agents) left at its default
                        parent = ".".join(parts[:depth]) or "config"
                        raise ConfigError(
                            f"override {key}: index {part} out of range ({parent} is not set; "
                            f"set the whole list, e.g. {parent}=[...])"
                        )
                    node[part] = {}
                node = node[part]
            else:
                parent = ".".join(parts[:depth])
                raise ConfigError(f"override {key}: {parent} is {node!r}, not a section or a list")
    return data


def _override_items(overrides: Overrides) -> list[tuple[str, Any, str]]:
    """(dotted key, value, the override as the user wrote it) for each override."""
    if overrides is None:
        return []
    if isinstance(overrides, str):  # one override: load_config(None, "train.max_steps=1")
        overrides = [overrides]
    if isinstance(overrides, Mapping):
        items = []
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise ConfigError(
                    f"override key {key!r}: expected a dotted name, e.g. train.max_steps"
                )
            # a copy: later overrides may set inside it (team.agents, then team.agents.0.x)
            items.append((key.strip(), copy.deepcopy(value), f"{key}={value!r}"))
        return items
    items = []
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. train.max_steps=10")
        key, raw = item.split("=", 1)
        items.append((key.strip(), parse_value(raw, key.strip()), item))
    return items


def parse_value(raw: str, key: str) -> Any:
    """An override's value as YAML; a malformed one is a ConfigError naming key and value."""
    if raw == "":
        return ""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as err:
        reason = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(
            f"override {key}: cannot parse value {raw!r} as YAML ({reason}); quote strings "
            "that contain YAML syntax"
        ) from None
    except RecursionError:
        raise ConfigError(f"override {key}: value nested too deeply") from None


BUILTIN_CONFIGS = Path(__file__).parents[1] / "configs"  # teamrl/configs


def resolve_config_path(path: str | Path) -> Path:
    """A YAML path, or the name of a shipped config (``quickstart`` -> teamrl/configs/...)."""
    p = Path(path)
    if p.exists():
        return p
    shipped = BUILTIN_CONFIGS / f"{p.name.removesuffix('.yaml')}.yaml"
    if shipped.exists():
        return shipped
    names = ", ".join(sorted(q.stem for q in BUILTIN_CONFIGS.glob("*.yaml")))
    raise ConfigError(
        f"config {str(path)!r}: no such file, and no shipped config of that name (shipped: {names})"
    )


def load_config(path: str | Path | None = None, overrides: Overrides = None) -> Config:
    """The validated config of a YAML file (a path or a shipped config's name; None: the
    defaults) with ``overrides`` applied: a list of ``key=value`` strings as on the command
    line, one such string, or a mapping ``{"train.max_steps": 10}`` (see apply_overrides)."""
    data: dict = {}
    if path is not None:
        data = read_yaml(resolve_config_path(path))
    data = apply_overrides(data, overrides)
    return from_dict(Config, data).validate()


def read_yaml(path: Path) -> dict:
    """A YAML mapping from ``path``, its aliases bounded (``teamrl.config.yaml_file``); any
    problem is a ConfigError naming the file (and the line and column of a syntax error)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read config file ({err})") from None
    try:
        return load_mapping(text)
    except YamlProblem as err:
        where = f", line {err.line}" if err.line is not None else ""
        where += f", column {err.column}" if err.column is not None else ""
        raise ConfigError(f"{path}{where}: {err.reason}") from None


def dump_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
