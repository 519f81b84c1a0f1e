"""The range of every config field and the checks that relate several fields.

Called by ``Config.validate``; each error names the dotted field path and the value, in one line.
Works on a ``Config`` without importing it (this module sits below ``teamrl.config``).
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any

from teamrl.config.policy_map import policy_agents
from teamrl.config.step_shape import step_shape
from teamrl.errors import ConfigError


def validate_config(self: Any) -> None:
    """Every field's range, from the table ``RULES`` (and ``AGENT_RULES`` per agent), then the
    checks that relate several fields."""
    for path, ok, want in RULES:
        value = _get(self, path)
        if value is not None or not want.endswith("or None"):
            _check(_safe(ok, value), path, value, want)
    _check_fidelity(self)  # delta, IS cap, resample rounds, per-agent overrides
    # Empty team.agents: the task's agents, filled in when the task is known
    # (teamrl.tasks.registry.bind_task), and checked again then.
    names = [ag.name for ag in self.team.agents]
    _check(len(set(names)) == len(names), "team.agents", names, "unique agent names")
    for i, ag in enumerate(self.team.agents):
        for field_name, ok, want in AGENT_RULES:
            value = getattr(ag, field_name)
            _check(_safe(ok, value), f"team.agents[{i}].{field_name}", value, want)
        check_prompt_template(ag.prompt, f"team.agents[{i}].prompt")
        # Greedy samples of one prompt are identical: every group would be flat.
        _check(
            ag.temperature > 0 or self.train.max_steps == 0,
            f"team.agents[{i}].temperature",
            ag.temperature,
            f"> 0 when training (num_generations={self.algorithm.num_generations} greedy "
            "samples are identical, so no group would have a learning signal); eval.greedy "
            "sets greedy evaluation",
        )
        if ag.model is not None and self.team.policies != "separate":
            raise ConfigError(
                f"team.agents[{i}].model: per-agent models need team.policies='separate', "
                f"got policies={self.team.policies!r}"
            )
    order = self.env.turn_order
    if order is not None and names:
        _check(
            sorted(order) == sorted(names),
            "env.turn_order",
            order,
            f"each agent of team.agents ({', '.join(names)}) exactly once",
        )
    check_max_turns(self.env)
    a = self.algorithm
    _check(
        a.baseline != "counterfactual" or (a.name == "magrpo" and a.joint_mode == "cross"),
        "algorithm.baseline",
        a.baseline,
        f"a baseline other than 'counterfactual' for algorithm.name={a.name!r} with "
        f"joint_mode={a.joint_mode!r} (the counterfactual needs each agent's alternatives "
        "with its partners' actions fixed: algorithm.name=magrpo with joint_mode=cross)",
    )
    leaves = step_shape(self).env_steps  # the recipe's count (teamrl.config.step_shape)
    _check(
        leaves <= MAX_EPISODES_PER_STEP,
        "algorithm.num_generations",
        self.algorithm.num_generations,
        f"a rollout tree of at most {MAX_EPISODES_PER_STEP:,} env steps per step (this "
        f"config makes {leaves:,}: prompts_per_step x tree size over env.max_turns, "
        "G^agents per node with joint_mode='cross')",
    )
    _check_mini_batches(self)


def _check_mini_batches(cfg: Any) -> None:
    """``train.num_mini_batches`` splits each policy's samples of a step; a policy never has
    more samples than the step's shape gives its agents (no early stop, no filter), so more
    minibatches than that would be capped at every step: refused. Fewer samples at run time
    (an early stop, DAPO's filter) are warned of once by the trainer."""
    agents = policy_agents(cfg)
    if not cfg.team.agents or not agents:
        return  # the task's agents: checked again once they are bound
    per_agent = step_shape(cfg).samples // len(cfg.team.agents)
    name, members = min(agents.items(), key=lambda item: len(item[1]))
    most = per_agent * len(members)
    n = cfg.train.num_mini_batches
    if n > most:
        raise ConfigError(
            f"train.num_mini_batches: {n} is more than the {most} samples policy {name!r} "
            f"trains on per step at most (algorithm {cfg.algorithm.name}, prompts_per_step "
            f"{cfg.train.prompts_per_step}, num_generations {cfg.algorithm.num_generations}, "
            f"env.max_turns {cfg.env.max_turns}), so every pass would make {most} optimizer "
            f"steps, not {n}; set it <= {most} or raise train.prompts_per_step"
        )


# --- the range of every field, in one place ---------------------------------------------------
# (dotted path, predicate, what is expected). A field whose rule ends in "or None" may be None.
# Floats are already finite here (``_coerce`` refuses nan and inf); ints are Python ints.

MAX_EPISODES_PER_STEP = 10**6  # env steps of one rollout; more never finishes a step on a host
SEED_LIMIT = 2**32  # numpy's seed range (torch's is wider)
# Python's json parser recurses once per level, within the interpreter's recursion limit
# (1,000 frames by default, some taken by the server's own stack): deeper is never parsed.
MAX_JSON_DEPTH = 512


def _ge(low: float) -> Any:
    return lambda v: v >= low


def _gt(low: float) -> Any:
    return lambda v: v > low


NAME_MAX = 255  # the longest file name, in bytes, on ext4, XFS, btrfs and APFS


def _safe_name(v: str) -> bool:
    # A folder name under log.output_dir: never empty, never a path, never '.' or '..', never
    # longer than a file name may be. No control or format character (newline, tab, NUL, the
    # line separators, bidi overrides): they split log lines and disguise the folder in `ls`.
    return (
        bool(v.strip())
        and v not in (".", "..")
        and not set(v) & {"/", "\\"}
        and not any(unicodedata.category(c)[0] == "C" or c in "\u2028\u2029" for c in v)
        and len(v.encode("utf-8", "surrogatepass")) <= NAME_MAX
    )


MODEL_NAME = f"a non-empty model name or path whose every '/' part is at most {NAME_MAX} bytes"


def _model_name_ok(v: str) -> bool:
    # A builtin name, a hub id (org/name) or a local folder. A path part longer than a file
    # name makes the file system refuse the lookup itself (ENAMETOOLONG), which pathlib raises.
    parts = v.split("/")
    return bool(v.strip()) and all(
        len(p.encode("utf-8", "surrogatepass")) <= NAME_MAX for p in parts
    )


RULES: list[tuple[str, Any, str]] = [
    (
        "run_name",
        _safe_name,
        f"a non-empty folder name of at most {NAME_MAX} bytes without '/', '\\', '..' or control "
        "characters (newline, tab, NUL...)",
    ),
    ("seed", lambda v: 0 <= v < SEED_LIMIT, "an int in [0, 2**32) (numpy's seed range)"),
    ("model.name_or_path", lambda v: _model_name_ok(v), MODEL_NAME),
    ("generation.fast_decode_max_shapes", _ge(1), ">= 1"),
    ("model.lora_r", _ge(1), ">= 1"),
    ("model.lora_alpha", _gt(0), "> 0"),
    ("model.lora_dropout", lambda v: 0 <= v < 1, "in [0, 1)"),
    (
        "model.lora_target_modules",
        lambda v: bool(v) and all(m.strip() for m in v),
        "a non-empty list of module names",
    ),
    ("model.device", lambda v: _device_ok(v), "'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'"),
    ("env.name", lambda v: bool(v.strip()), "a registered task name, or None"),
    ("env.max_turns", _ge(1), ">= 1"),
    ("env.reward_workers", lambda v: 1 <= v <= 1024, "in [1, 1024]"),
    ("env.step_timeout", lambda v: 0 <= v < float("inf"), ">= 0 and finite (0: no limit)"),
    ("algorithm.num_generations", _ge(2), ">= 2"),
    ("algorithm.num_iterations", _ge(1), ">= 1"),
    ("algorithm.discount", lambda v: 0 <= v <= 1, "in [0, 1] or None"),
    ("algorithm.epsilon", _gt(0), "> 0"),
    ("algorithm.epsilon_high", _gt(0), "> 0 or None"),
    ("algorithm.selection_temperature", _gt(0), "> 0"),
    (
        "algorithm.group_by",
        lambda v: len(set(v)) == len(v) and set(v) <= {"turn", "agent"},
        "distinct names from 'turn', 'agent' (e.g. [turn, agent]) or None",
    ),
    ("algorithm.beta", _ge(0), ">= 0"),
    ("algorithm.lam", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("algorithm.max_staleness", _ge(0), ">= 0 (0 = synchronous)"),
    ("algorithm.cliprange_value", _gt(0), "> 0 or None"),
    ("algorithm.critic_learning_rate", _gt(0), "a finite float > 0"),
    ("algorithm.critic_value_norm_decay", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("train.max_steps", _ge(0), ">= 0"),
    ("train.prompts_per_step", _ge(1), ">= 1"),
    ("train.num_mini_batches", _ge(1), ">= 1"),
    ("train.micro_batch_size", _ge(1), ">= 1 (None = the whole minibatch) or None"),
    ("train.max_tokens_per_micro_batch", _ge(1), ">= 1 (None = no token budget) or None"),
    ("train.learning_rate", _gt(0), "a finite float > 0"),
    ("train.weight_decay", _ge(0), ">= 0"),
    ("train.adam_beta1", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("train.adam_beta2", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("train.warmup_steps", _ge(0), ">= 0"),
    ("train.min_lr_ratio", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("train.max_grad_norm", _gt(0), "> 0 or None"),
    ("eval.eval_steps", _ge(0), ">= 0"),
    ("eval.num_examples", _ge(1), ">= 1"),
    (
        "eval.message_ablation",
        lambda v: len(set(v)) == len(v) and set(v) <= {"empty", "swap", "control"},
        "distinct modes from 'empty', 'swap', 'control' (teamrl.envs.messages.ABLATIONS), "
        "e.g. [empty, swap, control]; [] for none",
    ),
    ("log.output_dir", lambda v: bool(v.strip()), "a non-empty folder"),
    ("log.save_steps", _ge(0), ">= 0"),
    ("log.save_total_limit", _ge(1), ">= 1 (keep at least the checkpoint just written) or None"),
    ("log.num_groups_to_log", _ge(0), ">= 0"),
    ("log.wandb_project", lambda v: bool(v.strip()), "a non-empty project name"),
    ("log.warn_after_steps", _ge(0), ">= 0 (0 = never warn)"),
    ("distributed.address", lambda v: bool(v.strip()), "'local', 'auto' or a head 'host:port'"),
    ("distributed.num_workers_per_policy", _ge(1), ">= 1"),
    ("distributed.num_gpus_per_worker", _ge(0), ">= 0"),
    ("distributed.num_cpus_per_worker", _gt(0), "> 0"),
    ("distributed.gpu_memory_gb", _gt(0), "> 0 or None"),
    ("endpoint.request_timeout", _gt(0), "> 0 seconds"),
    ("endpoint.max_connections", _ge(1), ">= 1"),
    ("endpoint.max_body_mb", _ge(1), ">= 1"),
    ("endpoint.max_json_depth", lambda v: 1 <= v <= MAX_JSON_DEPTH, f"in [1, {MAX_JSON_DEPTH}]"),
    ("endpoint.max_batch_calls", _ge(1), ">= 1"),
]

AGENT_RULES: list[tuple[str, Any, str]] = [
    ("name", lambda v: bool(v.strip()), "a non-empty agent name"),
    ("model", lambda v: v is None or _model_name_ok(v), MODEL_NAME + " or None"),
    ("temperature", _ge(0), ">= 0"),
    ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("top_k", _ge(0), ">= 0 (0 = off)"),
    ("max_completion_length", _ge(1), ">= 1"),
    ("min_completion_length", _ge(0), ">= 0 (0 = off)"),
]


def _get(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _safe(ok: Any, value: Any) -> bool:
    try:
        return bool(ok(value))
    except (TypeError, ValueError, OverflowError):
        return False


def _device_ok(name: str) -> bool:
    return bool(re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", name))


def _check_fidelity(cfg: Any) -> None:
    a = cfg.algorithm
    # AT-GRPO and grpo always credit alpha * team + local; only MAGRPO has a choice to make
    if a.reward_per_agent and a.name != "magrpo":
        raise ConfigError(
            f"algorithm.reward_per_agent: only MAGRPO reads it (algorithm.name={a.name!r} always "
            "credits alpha * team + local); remove it or use algorithm.name=magrpo"
        )
    if a.delta is not None:
        hi = 1 + (a.epsilon if a.epsilon_high is None else a.epsilon_high)
        _check(a.delta > hi, "algorithm.delta", a.delta, f"> 1 + epsilon_high = {hi}")
    _check_critic(cfg)
    _check_async(cfg)
    _check_sharding(cfg)
    _check_bf16(cfg)
    cap, rounds = a.importance_sampling_cap, a.max_resample_rounds
    _check(cap >= 1, "algorithm.importance_sampling_cap", cap, ">= 1")
    _check(rounds >= 0, "algorithm.max_resample_rounds", rounds, ">= 0")
    # r * k3 estimates KL(pi || ref); r * k2 estimates no KL, and k1 already carries r.
    if a.use_bias_correction_kl and a.kl_estimator != "k3":
        raise ConfigError(
            f"algorithm.use_bias_correction_kl: needs kl_estimator='k3' (TRL's estimator), got "
            f"kl_estimator={a.kl_estimator!r}"
        )
    # it multiplies the KL term, which beta = 0 removes (no reference is even loaded)
    if a.use_bias_correction_kl and a.beta == 0:
        raise ConfigError(
            "algorithm.use_bias_correction_kl: true has no effect with algorithm.beta=0 (no KL "
            "term to correct); set algorithm.beta > 0 or remove it"
        )
    # ignore_eos runs every completion to its budget, so every one is marked truncated: with
    # mask_truncated_completions every token would leave the loss (loss 0, gradient 0).
    if a.mask_truncated_completions and cfg.team.ignore_eos:
        raise ConfigError(
            "algorithm.mask_truncated_completions: true with team.ignore_eos=true masks every "
            "completion (each runs to max_completion_length without EOS), so nothing would "
            "train; set one of them false"
        )
    _check_agent_overrides(cfg)


def _check_async(cfg: Any) -> None:
    """Asynchronous training (max_staleness > 0) samples on a copy of the models (a second
    Team here, more worker groups on Ray) that only the hf backend builds, and never draws
    extra rollouts mid-step."""
    a = cfg.algorithm
    if a.max_staleness == 0:
        return
    why = f"algorithm.max_staleness={a.max_staleness}"
    if cfg.generation.backend != "hf":
        raise ConfigError(
            f"generation.backend: {cfg.generation.backend!r} with {why}; the asynchronous "
            "generator keeps its own hf copy of the models (use generation.backend=hf)"
        )
    if a.filter_groups and a.max_resample_rounds:
        raise ConfigError(
            f"algorithm.max_resample_rounds: {a.max_resample_rounds} with {why}; resampling "
            "draws rollouts inside a step, which the asynchronous generator cannot (set it 0)"
        )


def _check_sharding(cfg: Any) -> None:
    d = cfg.distributed
    if d.sharding == "fsdp" and d.backend != "ray":
        raise ConfigError(
            f"distributed.sharding: 'fsdp' shards a policy over its Ray worker group; "
            f"distributed.backend is {d.backend!r} (set backend=ray)"
        )
    if d.fsdp_param_dtype == "bfloat16" and (d.sharding != "fsdp" or d.num_gpus_per_worker == 0):
        raise ConfigError(
            "distributed.fsdp_param_dtype: 'bfloat16' needs sharding=fsdp on GPU workers "
            f"(sharding={d.sharding!r}, num_gpus_per_worker={d.num_gpus_per_worker}); CPU "
            "workers shard in float32"
        )
    kib = d.cpu_mmap_threshold_kib
    if kib is not None and not 0 <= kib <= 32 * 1024:
        raise ConfigError(
            f"distributed.cpu_mmap_threshold_kib: {kib} is outside 0 .. 32768 (KiB; glibc "
            "refuses a larger mmap threshold; 0 keeps its adaptive one)"
        )


def _check_bf16(cfg: Any) -> None:
    """train.bf16 rounds a float32 model's frozen-base products to bf16 inside the fused LoRA
    node (teamrl.update.lora_linear): every other setting would leave it doing nothing."""
    t, m = cfg.train, cfg.model
    if not t.bf16:
        return
    why = None
    if m.dtype != "float32":
        why = f"model.dtype is {m.dtype!r}: its products are in that dtype already"
    elif cfg.team.policies != "lora" and not m.use_peft:
        why = (
            f"team.policies={cfg.team.policies!r} trains every weight: a bf16 copy of the base "
            "needs a frozen base (team.policies=lora or model.use_peft=true)"
        )
    elif not t.fused_lora:
        why = "train.fused_lora=false runs PEFT's forward, which it does not reach"
    elif t.one_pass_lora:
        why = "train.one_pass_lora routes the adapters in one pass, which it does not reach"
    elif cfg.distributed.sharding != "none":
        why = f"distributed.sharding={cfg.distributed.sharding!r} keeps PEFT's forward"
    if why:
        raise ConfigError(f"train.bf16: true needs a float32 model with fused LoRA; {why}")


def _check_critic(cfg: Any) -> None:
    """A learned critic (IAC, MAAC) replaces the group baseline: MAGRPO's joint tree or AT-GRPO's
    agent-turn tree feeds it (trajectory GRPO keeps no states), and nothing may undo it
    (per-group centring, another baseline, flat-group filtering that reads the group
    baseline's advantages)."""
    a = cfg.algorithm
    if a.critic == "none":
        if a.critic_level != "turn":
            raise ConfigError(
                f"algorithm.critic_level: {a.critic_level!r} needs a critic (algorithm.critic "
                "iac or maac)"
            )
        if a.critic_value_norm:
            raise ConfigError(
                "algorithm.critic_value_norm: true needs a critic (algorithm.critic iac or maac)"
            )
        return
    why = f"algorithm.critic={a.critic!r}"
    if a.name not in ("magrpo", "at_grpo"):
        raise ConfigError(
            f"algorithm.critic: {a.critic!r} runs on MAGRPO's joint tree or AT-GRPO's agent-turn "
            f"tree; algorithm.name is {a.name!r} (set algorithm.name=magrpo or at_grpo, or "
            "algorithm.critic=none)"
        )
    if a.scale_rewards == "group":
        raise ConfigError(
            f"algorithm.scale_rewards: 'group' centres each group, which cancels the critic's "
            f"value (every sample of a node shares it); with {why} use none, batch or agent"
        )
    if a.baseline != "mean":
        raise ConfigError(
            f"algorithm.baseline: {a.baseline!r} with {why}; the critic's value is the baseline "
            "(leave baseline=mean)"
        )
    if a.filter_groups:
        raise ConfigError(
            f"algorithm.filter_groups: true with {why}; a group of equal returns still has "
            "advantages against the critic, so dropping it would discard signal"
        )
    if a.critic == "maac" and a.reward_per_agent:
        raise ConfigError(
            "algorithm.reward_per_agent: true with critic='maac'; the centralised critic values "
            "the team's return (use critic='iac' for per-agent rewards)"
        )
    if a.critic == "maac" and a.critic_level == "token":
        raise ConfigError(
            "algorithm.critic_level: 'token' needs critic='iac' (the centralised critic reads "
            "the joint observation, one value per state)"
        )


def _check_agent_overrides(cfg: Any) -> None:
    """Per-agent learning_rate / num_iterations: positive, and equal within a shared policy;
    stop strings non-empty (an empty one is in every text: every reply would end at once)."""
    for ag in cfg.team.agents:
        least, most = ag.min_completion_length, ag.max_completion_length
        _check(
            least <= most,
            f"team.agents[{ag.name}].min_completion_length",
            least,
            f"<= max_completion_length ({most})",
        )
        bad = [s for s in ag.stop if not isinstance(s, str) or not s]
        if bad:
            raise ConfigError(
                f"team.agents[{ag.name}].stop: expected non-empty strings, got {bad[0]!r}"
            )
    for field_name, low in (("learning_rate", 0), ("num_iterations", 1)):
        values = {ag.name: getattr(ag, field_name) for ag in cfg.team.agents}
        for name, v in values.items():
            ok = v is None or (v > 0 if low == 0 else v >= low)
            _check(ok, f"team.agents[{name}].{field_name}", v, "> 0" if low == 0 else ">= 1")
        for members in policy_agents(cfg).values():
            mine = {name: values[name] for name in members}
            if len(set(mine.values())) > 1:
                raise ConfigError(
                    f"team.agents[*].{field_name}: agents {sorted(mine)} share one policy "
                    f"(policies={cfg.team.policies!r}) but set different values {mine}; give "
                    "all the same"
                )


def check_prompt_template(template: str, where: str) -> None:
    """A prompt template may only name fields: ``{observation}``, ``{question}``.

    ``str.format`` evaluates ``{x.attr}`` and ``{x[key]}`` on the live object, so a template
    from a shared config could walk ``{observation.__class__.__mro__}`` into the interpreter;
    a conversion (``!r``) or a format spec (``{x:>99999999}`` pads to any size, and a nested
    ``{x:{y}}`` is a second template) has no use in a prompt either. Positional fields
    (``{}``, ``{0}``) have nothing to fill them. Which names a dataset row has is checked by
    the preflight, which sees the task.
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as err:  # an unmatched brace
        raise ConfigError(f"{where}: malformed template {template!r} ({err})") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue  # literal text (and '{{' / '}}')
        field = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
        field += "}"
        if not name or name.isdigit():
            problem = "is positional; name a field"
        elif set(name) & set(".[]"):
            problem = "reads an attribute or an index; a field is a plain name"
        elif conversion is not None or spec:
            problem = "has a conversion or format spec; a field is a plain name"
        else:
            continue
        raise ConfigError(
            f"{where}: field {field} in template {template!r} {problem}, e.g. {{observation}} "
            "or {question}"
        )


def _check(ok: bool, name: str, value: Any, want: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: expected {want}, got {value!r}")


def check_max_turns(env: Any) -> None:
    """env.max_turns (where the rollout stops) and a task's own max_turns must agree."""
    if "max_turns" in env.kwargs and env.kwargs["max_turns"] != env.max_turns:
        raise ConfigError(
            f"env.kwargs.max_turns={env.kwargs['max_turns']!r} differs from "
            f"env.max_turns={env.max_turns!r}: the rollout stops after env.max_turns turns, so "
            "set env.max_turns (the task receives it) and drop env.kwargs.max_turns"
        )
