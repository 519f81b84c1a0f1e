"""Typed run configuration: YAML plus ``key=value`` overrides, validated with clear errors.

Every field carries a help string (``teamrl train --help-config`` prints them all) and every
default lives here, in one place. Names follow TRL where the idea is the same
(``num_generations``, ``max_completion_length``, ``temperature``, ``top_p``, ``beta``,
``epsilon``, ``num_iterations``, ``loss_type``, ``scale_rewards``, ``learning_rate``...).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from teamrl.config_engines import DistributedConfig, GenerationConfig
from teamrl.config_fields import _f
from teamrl.config_rules import check_max_turns, validate_config
from teamrl.config_run import EvalConfig, LogConfig
from teamrl.errors import ConfigError

__all__ = [
    "ConfigError",
    "DistributedConfig",
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
    agents: list[AgentConfig] = _f([], "The team, in the env's agent order.")
    chat_template: bool = _f(True, "Apply the tokenizer's chat template when it has one.")
    ignore_eos: bool = _f(
        False, "Always generate max_completion_length tokens (benchmarks with equal lengths)."
    )


@dataclass
class EnvConfig:
    name: str = _f("tldr", "Registered task name (see `teamrl envs`).")
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
            "open, see the README's Sandbox section.",
        )
    )


@dataclass
class AlgorithmConfig:
    name: Literal["magrpo", "at_grpo", "grpo"] = _f(
        "magrpo",
        "Rollout shape and grouping. 'magrpo': simultaneous joint tree, groups (problem, node, agent). "
        "'at_grpo': sequential agent-turn tree, K branches per (turn, agent), groups (problem, turn, agent). "
        "'grpo': K independent episodes per problem, groups (problem).",
    )
    num_generations: int = _f(
        4, "G (MAGRPO) or K (AT-GRPO, GRPO): samples per group. Must be >= 2."
    )
    joint_mode: Literal["aligned", "cross"] = _f(
        "aligned",
        "'aligned': G joint actions per node (j-th sample of every agent); 'cross': the "
        "Cartesian product G^N, each completion credited with the marginal mean return.",
    )
    discount: float | None = _f(
        None,
        "gamma. None = the algorithm's default. 'magrpo': R = r + gamma * mean(R of the child "
        "node's joint actions); default 1.0 (CoMLRL 1.4.3 is undiscounted). 'at_grpo': default "
        "None = each sample's return is its own reward; a number turns it into the return-to-go "
        "of the same agent along the chosen path, r + gamma * R_next. That term is constant "
        "within a group, so it changes advantages only with scale_rewards='batch' (a rescale) "
        "or with baseline='raw' and scale_rewards='none'. 'grpo': unused (a sample carries its "
        "episode's undiscounted total reward).",
    )
    early_termination_threshold: float | None = _f(
        None,
        "Stop expanding a node whose mean joint reward exceeds this. None = never stop early.",
    )
    baseline: Literal["mean", "rloo", "max", "raw", "counterfactual"] = _f(
        "mean",
        "Group baseline: 'mean' (MAGRPO), 'rloo' (MA-RLOO), 'max' (MA-ReMax), 'raw' "
        "(MA-REINFORCE, no baseline), 'counterfactual' (COMA: the return minus the mean over the "
        "agent's own alternatives with the partners' actions fixed; MAGRPO with "
        "joint_mode='cross' only, where it equals 'mean': docs/algorithms/counterfactual.md).",
    )
    scale_rewards: Literal["group", "batch", "agent", "none"] = _f(
        "group",
        "Std normalisation of advantages, after centring per group: 'group' divides by the "
        "group's std; 'batch' divides by the std of all raw rewards (returns) in the batch, as "
        "TRL does; 'agent' divides by the std of the raw returns of the sample's agent across "
        "the batch (per-agent normalisation); 'none' leaves them unscaled (Dr. GRPO). With a "
        "critic there is no centring: batch and agent only divide by those stds.",
    )
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = _f(
        "dapo",
        "Loss aggregation: 'grpo' sequence-mean of token-means; 'dr_grpo' sum / (n * "
        "max_completion_length); 'dapo' token-mean over the optimizer step; 'bnpo' token-mean "
        "per forward chunk.",
    )
    epsilon: float = _f(0.2, "Lower clip range of the PPO ratio.")
    epsilon_high: float | None = _f(
        None, "Upper clip range, > 0 (None = epsilon); DAPO's clip-higher, TRL's epsilon_high."
    )
    delta: float | None = _f(
        None,
        "Cap on the unclipped ratio, > 1 + epsilon_high (None = off): bounds the loss of a token "
        "with a negative advantage whose ratio has grown (two-sided clipping, INTELLECT-2; TRL's "
        "delta; the idea of dual-clip PPO).",
    )
    importance_sampling_level: Literal["token", "sequence"] = _f(
        "token",
        "PPO ratio per token, or one per sequence, exp(mean_t log ratio) (GSPO, Zheng et al. 2025; TRL's importance_sampling_level).",
    )
    importance_sampling_correction: bool | None = _f(
        None,
        "Reweight each token by the ratio pi_old / q, bounded by importance_sampling_cap, q the "
        "sampler's recorded distribution (truncated IS; TRL's "
        "vllm_importance_sampling_correction). None = on whenever the sampler differs from the "
        "trainer: top_p < 1, top_k > 0 (unless truncated_scoring) or a backend other than 'hf'.",
    )
    importance_sampling_mode: Literal[
        "token_truncate",
        "token_mask",
        "sequence_truncate",
        "sequence_mask",
        "geometric_truncate",
        "geometric_mask",
    ] = _f(
        "token_truncate",
        "IS weight per token ('token_*'), one per sequence: the product of its tokens' ratios "
        "('sequence_*', exact but it falls geometrically with length under top-p: 0.9^48 = "
        "0.0064), or their geometric mean ('geometric_*', length-normalised as in GSPO); "
        "'*_truncate' caps it at importance_sampling_cap, '*_mask' sets it to 0 above the cap "
        "(TRL's vllm_importance_sampling_mode, whose default is sequence_mask). See "
        "docs/algorithms/update.md.",
    )
    importance_sampling_cap: float = _f(
        2.0,
        "C >= 1, the IS weight bound (TRL: vllm_importance_sampling_clip_max, named "
        "vllm_importance_sampling_cap before TRL 1.6; TRL's default is 3.0).",
    )
    truncated_scoring: bool = _f(
        False,
        "Score log-probs under the sampler's own top-k/top-p truncated, renormalised "
        "distribution, so pi_old equals the sampler's q (no IS correction needed on 'hf').",
    )
    mask_truncated_completions: bool = _f(
        False,
        "Completions cut at max_completion_length (no EOS) contribute no loss (DAPO's overlong "
        "filtering; TRL's mask_truncated_completions). They still count in the advantages.",
    )
    disable_dropout: bool = _f(
        True,
        "Set every dropout probability (LoRA's too) to 0 for rollout, old log-probs and update, "
        "so the ratio compares the same function (TRL's disable_dropout).",
    )
    num_iterations: int = _f(1, "mu: optimisation passes over each batch of samples.")
    selection: Literal["greedy", "sample", "random"] = _f(
        "greedy",
        "AT-GRPO: which of the K branches continues: the best reward, a softmax sample, or "
        "uniform at random (unbiased).",
    )
    selection_temperature: float = _f(1.0, "AT-GRPO: softmax temperature for selection='sample'.")
    group_by: list[str] | None = _f(
        None,
        "AT-GRPO grouping ablation: which of 'turn', 'agent' split a problem's groups. None = "
        "both (the paper's (problem, turn, agent)); [] = problem only; [agent]; [turn].",
    )
    alpha: float = _f(1.0, "AT-GRPO/GRPO: an agent's reward is alpha * team + local.")
    reward_per_agent: bool = _f(
        False,
        "MAGRPO: False (the paper) credits every agent of a joint action with the team reward; "
        "True credits each agent with alpha * team + its own Step.local_rewards term, so with "
        "alpha=0 the agents learn independently, each on its own reward, under MAGRPO's joint "
        "sampling and groups (the per-agent reward design MAGRPO argues against).",
    )
    critic: Literal["none", "iac", "maac"] = _f(
        "none",
        "MAGRPO's advantage from a learned critic instead of the group's mean "
        "(docs/algorithms/iac.md, maac.md). 'none': the group baseline. 'iac': independent "
        "actor-critic, one value head per agent on its own policy's last hidden state, reading "
        "its own prompt. 'maac': one centralised value head that reads every agent's "
        "observation at once. Advantages by GAE (discount, lam) on MAGRPO's joint tree; needs "
        "scale_rewards none|batch|agent (per-group centring would cancel the critic).",
    )
    critic_level: Literal["turn", "token"] = _f(
        "turn",
        "Where the critic's GAE runs: 'turn' (one value per state, one advantage per "
        "completion) or 'token' (a value per token, the turn's reward on its last token, one "
        "advantage per token; 'iac' only). The discount applies between turns, lam per step.",
    )
    lam: float = _f(
        1.0,
        "GAE lambda (TRL's PPO name) for critic != 'none': 1 = the return minus the value "
        "(Monte Carlo), 0 = the one-step TD error.",
    )
    cliprange_value: float | None = _f(
        None,
        "Value clipping (TRL's PPO name): the critic's loss takes the larger of its error and "
        "the error of its prediction held within this distance of the value the advantages "
        "used. None = plain squared error.",
    )
    critic_learning_rate: float = _f(
        1e-3,
        "Learning rate of the critics' value heads (AdamW, constant); each trains for "
        "num_iterations passes of train.num_mini_batches steps per trainer step.",
    )
    filter_groups: bool = _f(
        False, "Drop zero-variance groups from the update (their fraction is always logged)."
    )
    max_resample_rounds: int = _f(
        0,
        "With filter_groups: extra rollouts on new problems until the step has as many non-flat "
        "groups as its first rollout had groups, at most this many (DAPO's dynamic sampling; "
        "logged as filter/resample_rounds). 0 = only drop.",
    )
    beta: float = _f(0.0, "KL coefficient to the reference policy (0 = no reference is loaded).")
    kl_estimator: Literal["k1", "k2", "k3"] = _f(
        "k3",
        "KL to the reference, each pulling pi toward pi_ref. 'k3': (r - log r - 1), r = "
        "pi_ref/pi, in the loss; its gradient is that of KL(ref || pi) (TRL's k3 with "
        "use_bias_correction_kl off; on, see that field). 'k2': "
        "0.5 (log pi - log pi_ref)^2 in the loss, gradient of KL(pi || ref). 'k1': log pi - log "
        "pi_ref as a per-token reward penalty (detached, CoMLRL's form), gradient of "
        "KL(pi || ref); k1 as a plain loss would have zero expected gradient.",
    )
    use_bias_correction_kl: bool = _f(
        False,
        "With kl_estimator='k3': multiply k3 by the (not detached) policy ratio pi / pi_old, so "
        "the term estimates KL(pi || ref) and its gradient is that of KL(pi || ref), not "
        "KL(ref || pi) (TRL's use_bias_correction_kl, from DeepSeek-V3.2; on by default in "
        "TRL 1.16).",
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

    def validate(self) -> Config:
        """Every field's range and the checks that relate several fields
        (``teamrl.config_rules``); each error names the field path and the value."""
        validate_config(self)
        return self


# ---------------------------------------------------------------------------------------------
# Building dataclasses from plain dicts, with errors that name the dotted field.


def from_dict(cls: type, data: dict, where: str = "") -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        path = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"{path}: unknown key; valid keys here: {', '.join(sorted(fields))}")
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


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides; values are parsed as YAML (``3``, ``true``, ``[a, b]``).

    A numeric part indexes a list (``team.agents.1.temperature=0.5``). Every mistake is a
    ConfigError naming the override: a missing ``=``, an empty key part, a value that is not
    YAML, an index out of range (with the list's length), or a path through a non-section.
    """
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. train.max_steps=10")
        key, raw = item.split("=", 1)
        key = key.strip()
        parts = key.split(".")
        if not all(parts):
            raise ConfigError(f"override {item!r}: malformed key {key!r}")
        value = parse_value(raw, key)
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


BUILTIN_CONFIGS = Path(__file__).parent / "configs"


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


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    data: dict = {}
    if path is not None:
        data = read_yaml(resolve_config_path(path))
    data = apply_overrides(data, list(overrides or []))
    return from_dict(Config, data).validate()


def read_yaml(path: Path) -> dict:
    """A YAML mapping from ``path``; any problem is a ConfigError naming the file (and the line
    and column of a syntax error)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read config file ({err})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{path}{where}: invalid YAML: {reason}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a YAML mapping at the top level, got {type(data).__name__}"
        )
    return data


def dump_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
