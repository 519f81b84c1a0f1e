"""Checks that need no model weights, run before anything heavy loads.

``preflight(cfg, task)`` is what ``teamrl train`` and ``teamrl eval`` call between reading the
config and building the trainer, so a user mistake costs a second and one line, not a model
load and a traceback:

- optional loggers (``log.tensorboard``, ``log.wandb``) are installed;
- ``model.device`` exists on this machine;
- a sandbox mode named in ``env.sandbox_isolation`` can run here (not the weak ones as root),
  and the sandbox's disk bound is positive;
- the task has training data, and every row has the fields the agents' prompt templates use;
- each model resolves (builtin, local folder, or a hub id in the cache or reachable) and every
  ``model.lora_target_modules`` entry names a module of it (read from its config alone);
- one step's memory, estimated from the config, fits in the memory that is free.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import string
from typing import Any

from teamrl.config import Config, ConfigError
from teamrl.config.policy_map import (
    base_of,
    model_copies,
    uses_lora,
)
from teamrl.team.memory import (  # noqa: F401  (preflight.estimate_memory etc. stay public)
    Estimate,
    GiB,
    estimate_memory,
    micro_batch_bytes,
    micro_batch_tokens,
    shape_of,
)


def preflight(cfg: Config, task: Any = None, check_memory: bool = True) -> None:
    """Every check that needs no model. Raises ConfigError with a one-line message. The model
    checks (lengths, LoRA targets, memory) read each model's config, resolved as the model
    will be (``teamrl.team.models``: a builtin or local folder from disk; a hub id from the
    cache, or from the hub where it is reachable and not switched off), so a model that cannot
    be had here is refused here, by ``train`` and ``train --dry-run`` alike."""
    check_loggers(cfg)
    check_device(cfg)
    check_sandbox(cfg)
    if not cfg.team.agents:  # filled from the task (tasks.registry.bind_task) before this
        raise ConfigError(
            "team.agents: empty, and no task given to take its agents from: name the agents, "
            "or check the config with its task"
        )
    if task is not None:
        check_task(cfg, task)
    models = {name: meta_model_of(cfg, name) for name in model_names(cfg)}
    check_lengths(cfg, models)
    if uses_lora(cfg):
        for name, model in models.items():
            check_lora_targets(cfg.model.lora_target_modules, model, name)
    # Under Ray the models live on the workers, which Ray places where their resources are
    # free: each worker is checked against one GPU when the config says how large one is.
    if check_memory and cfg.distributed.backend == "none":
        est = estimate_memory(cfg, models, prompt_tokens(cfg, task))
        check_fits(est, available_memory(cfg.model.device))
    elif check_memory:
        check_placement(cfg, models, prompt_tokens(cfg, task))


# --- loggers and device ---------------------------------------------------------------------


def check_loggers(cfg: Config) -> None:
    for flag, module, package in (
        ("tensorboard", "tensorboard", "tensorboard"),
        ("wandb", "wandb", "wandb"),
    ):
        if getattr(cfg.log, flag) and importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"log.{flag}=true but {package} is not installed: pip install {package} "
                f"(or set log.{flag}=false)"
            )


def check_device(cfg: Config) -> None:
    import torch

    device = cfg.model.device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"model.device={device} but torch.cuda.is_available() is False "
                "(use model.device=auto or cpu)"
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        count = torch.cuda.device_count()
        if index >= count:
            raise ConfigError(
                f"model.device={device} but this machine has {count} CUDA device(s) "
                f"(cuda:0..cuda:{count - 1})"
            )
    if device == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("model.device=mps but torch.backends.mps.is_available() is False")


def check_sandbox(cfg: Config) -> None:
    """A sandbox mode named in the config can run here, or one line now rather than when the
    first model-written program runs, steps into training (``auto`` is probed then); the
    disk bound is a positive number."""
    from teamrl.sandbox import mode_problem
    from teamrl.tasks.run_program import disk_bound

    try:
        disk_bound(cfg.env)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    mode = cfg.env.sandbox_isolation
    if (problem := mode_problem(mode)) is not None:
        raise ConfigError(f"env.sandbox_isolation={mode}: {problem}")


# --- the task's data ------------------------------------------------------------------------


def check_task(cfg: Config, task: Any) -> None:
    """A training split with rows, and every row holds the fields the prompt templates use."""
    if len(task.train) == 0:
        raise ConfigError(
            f"env.name={cfg.env.name}: the task's training split is empty (env.kwargs="
            f"{cfg.env.kwargs!r})"
        )
    for split_name in ("train", "eval"):
        rows = getattr(task, split_name, ()) or ()
        for i, agent in enumerate(cfg.team.agents):
            fields = template_fields(agent.prompt, f"team.agents[{i}].prompt")
            fields.discard("observation")
            for j, row in enumerate(rows):
                missing = sorted(f for f in fields if not _has(row, f))
                if missing:
                    raise ConfigError(
                        f"team.agents[{i}].prompt uses {{{missing[0]}}}, but row {j} of the "
                        f"{split_name} split of task {task.name!r} has no field {missing[0]!r} "
                        f"(its fields: {', '.join(sorted(map(str, row)))})"
                    )
    env = task.make_env()
    from teamrl.apps.task import check_app

    if check_app(cfg, task, env):  # an app's episodes are its own code: nothing to step here
        return
    check_turn_shape(cfg, task, env)
    for j in range(min(8, len(task.train))):  # the env's own reads, on the first rows
        reset(env, task.train[j], j, task)
    check_reward(cfg, task)


DUMMY_REPLY = "A dummy reply."  # what every agent says in the reward's trial run


def check_reward(cfg: Config, task: Any) -> Any:
    """The reward, once, before any model loads: a fresh env of the task, reset on the first
    training row, stepped with every agent saying ``DUMMY_REPLY`` (one joint action, or the
    agents in turn order). A reward that returns None, a string or NaN, takes the wrong
    arguments or reads a missing key is one line here, naming the user's file and line, not a
    traceback after the model has loaded. Returns the (checked) last step."""
    from teamrl.envs.sequential import SequentialTurns
    from teamrl.rollout.common import RewardError, step_env

    env = task.make_env()
    if cfg.env.turn_order:  # as the trainer wraps it
        env = SequentialTurns(env, list(cfg.env.turn_order))
    reset(env, task.train[0], 0, task)
    where = f"task {task.name!r}, train row 0, every agent replying {DUMMY_REPLY!r}"
    try:  # the rollout's own step: the same checks, the same one-line errors
        for agent in getattr(env, "turn_order", None) or [None]:
            actions = {agent: DUMMY_REPLY} if agent else dict.fromkeys(env.agents, DUMMY_REPLY)
            step = step_env(env, actions, where)
            if step.done:
                break
        return step
    except RewardError as err:
        raise ConfigError(str(err)) from None


def check_turn_shape(cfg: Config, task: Any, env: Any) -> None:
    """The algorithm's rollout and the env take the agents' actions the same way: MAGRPO's
    joint tree sends every agent's action in one ``step``; AT-GRPO's tree and trajectory GRPO
    send one agent's at a time, in ``turn_order`` (the env's, or ``env.turn_order``, which
    wraps the env). A mismatch would fail at the first step, after the model loads."""
    if len(env.agents) < 2:
        return
    order = getattr(env, "turn_order", None) or cfg.env.turn_order
    name = cfg.algorithm.name
    if name == "magrpo" and order:
        raise ConfigError(
            f"algorithm.name=magrpo: the team acts jointly, all agents in one step, but task "
            f"{task.name!r} takes its agents in turn (turn_order {list(order)}); use "
            "algorithm.name=at_grpo or grpo, or the task's simultaneous mode where it has one "
            "(env.kwargs={mode: simultaneous}; without env.turn_order)"
        )
    if name != "magrpo" and not order:
        raise ConfigError(
            f"algorithm.name={name}: its agents act in turn, but task {task.name!r} takes all "
            f"{len(env.agents)} agents' actions in one step (no turn_order); use "
            "algorithm.name=magrpo, set env.turn_order (e.g. "
            f"env.turn_order=[{', '.join(env.agents)}]), or the task's sequential mode"
        )


def reset(env: Any, row: Any, index: int, task: Any) -> dict:
    """``env.reset(row)``, where a KeyError for a field the row lacks names the row and field."""
    try:
        return env.reset(row)
    except KeyError as err:
        key = err.args[0] if err.args else None
        if key is None or _has(row, key):
            raise  # not a missing field of the row: a bug in the env
        raise ConfigError(
            f"row {index} of the train split of task {task.name!r} has no field {key!r}, which "
            f"its env reads (its fields: {', '.join(sorted(map(str, row)))})"
        ) from None


def template_fields(template: str, where: str) -> set[str]:
    """The top-level names a ``str.format`` template reads (``{question}``, ``{ex[a]}`` -> ex)."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as err:  # an unmatched brace
        raise ConfigError(f"{where}: malformed template {template!r} ({err})") from None
    out = set()
    for name in names:
        head = name.split(".")[0].split("[")[0]
        if head == "" or head.isdigit():
            raise ConfigError(
                f"{where}: positional field {{{name}}} in template {template!r}; name a field, "
                "e.g. {observation} or {question}"
            )
        out.add(head)
    return out


def _has(row: Any, key: str) -> bool:
    try:
        return key in row
    except TypeError:
        return False


# --- models ---------------------------------------------------------------------------------


def model_names(cfg: Config) -> list[str]:
    """The distinct base models the team loads."""
    return list(dict.fromkeys(model_copies(cfg)))


def model_config_of(cfg: Config, name: str) -> Any:
    from teamrl.team.models import model_config

    return model_config(name, seed=cfg.seed)


def meta_model_of(cfg: Config, name: str) -> Any:
    model_cfg = model_config_of(cfg, name)
    try:
        return meta_model(model_cfg)
    except ValueError as err:  # e.g. an encoder-only or unknown architecture
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"model.name_or_path: {name!r} is not a causal language model transformers can "
            f"build ({reason})"
        ) from err


def meta_model(model_cfg: Any) -> Any:
    """The model a transformers config describes, built on the meta device: its modules and
    parameter shapes, with no memory and no weights."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(model_cfg)


def check_lengths(cfg: Config, models: dict[str, Any]) -> None:
    """A completion budget longer than the model's context can never be generated."""
    for i, agent in enumerate(cfg.team.agents):
        name = base_of(cfg, agent)
        limit = getattr(models[name].config.get_text_config(), "max_position_embeddings", None)
        if limit and agent.max_completion_length >= limit:
            raise ConfigError(
                f"team.agents[{i}].max_completion_length: expected < {limit} (the context "
                f"length of {name!r}), got {agent.max_completion_length}"
            )


def check_lora_targets(targets: list[str], model: Any, model_name: str) -> None:
    """Each target must match a module as PEFT matches them: the name, or a dotted suffix.
    (PEFT itself only fails when no target matches; a typo in one of several would silently
    leave that layer untrained.)"""
    import torch

    names = [n for n, _ in model.named_modules() if n]
    for target in targets:
        if not any(n == target or n.endswith("." + target) for n in names):
            linear = sorted(
                {
                    n.rsplit(".", 1)[-1]
                    for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear)
                }
            )
            raise ConfigError(
                f"model.lora_target_modules: {target!r} matches no module of {model_name!r}; "
                f"its linear layers are: {', '.join(linear)}"
            )


# --- memory (the estimate itself: teamrl.team.memory) --------------------------------------


def worker_estimate(cfg: Config, models: dict[str, Any], prompt_len: int, plan: Any) -> Estimate:
    """One worker of a Ray policy group (``plan``: a ``teamrl.scale.placement.GroupPlan``):
    the group's own agents and model; it generates and trains on about 1/W of the group's
    rows. With ``sharding=fsdp`` over W > 1 workers the weights, gradients and optimizer state
    are 1/W each, and the worker keeps a full replica of the weights to sample from."""
    agents = [a for a in cfg.team.agents if a.name in plan.agents]
    group = dataclasses.replace(cfg, team=dataclasses.replace(cfg.team, agents=agents))
    if cfg.distributed.num_gpus_per_worker > 0:  # no CPU weight packing on a GPU worker
        group = dataclasses.replace(
            group, generation=dataclasses.replace(group.generation, cpu_prepack="off")
        )
    est = estimate_memory(group, models, prompt_len)
    w = plan.workers
    sharded = cfg.distributed.sharding == "fsdp" and w > 1
    return Estimate(
        weights=est.weights / w if sharded else est.weights,
        optimizer=est.optimizer / w if sharded else est.optimizer,
        generation=est.generation / w,
        training=est.training / w,
        rows=math.ceil(est.rows / w),
        seq=est.seq,
        replica=est.weights if sharded else 0.0,
    )


def check_placement(cfg: Config, models: dict[str, Any], prompt_len: int) -> list[str]:
    """With ``distributed.gpu_memory_gb``: each group's per-worker estimate (lines for the dry
    run), or a one-line ConfigError for the first worker that cannot fit one GPU."""
    from teamrl.scale.placement import placement_plan

    gib = cfg.distributed.gpu_memory_gb
    if gib is None:
        return []
    lines = []
    for plan in placement_plan(cfg):
        est = worker_estimate(cfg, models, prompt_len, plan)
        if est.total > gib * GiB:
            sharded = cfg.distributed.sharding == "fsdp"
            advice = (
                "raise distributed.num_workers_per_policy"
                if sharded
                else "set distributed.sharding=fsdp and num_workers_per_policy >= 2"
            )
            raise ConfigError(
                f"distributed.gpu_memory_gb={gib:g}: a worker of group {plan.name!r} "
                f"({plan.workers} worker(s), sharding={cfg.distributed.sharding}) needs an "
                f"estimated {est.describe()}, more than one GPU holds: {advice}, or lower the "
                "batch (num_generations, prompts_per_step, max_tokens_per_micro_batch)"
            )
        lines.append(f"group {plan.name!r}: per worker {est.describe()}")
    return lines


PROMPT_BUDGET = 256  # tokens, when the task's prompts cannot be measured


def prompt_tokens(cfg: Config, task: Any) -> int:
    """The prompt budget: the longest first-turn prompt of a few training rows, at 3 characters
    per token (English BPE averages about 4; code and grids take more tokens), or
    PROMPT_BUDGET without a task."""
    if task is None or len(task.train) == 0:
        return PROMPT_BUDGET
    env = task.make_env()
    longest = 0
    for j in range(min(8, len(task.train))):
        row = task.train[j]
        obs = reset(env, row, j, task)
        for agent in cfg.team.agents:
            system = agent.system if agent.system is not None else task.agents.get(agent.name, "")
            try:
                user = agent.prompt.format_map({**row, "observation": obs.get(agent.name, "")})
            except (KeyError, IndexError, ValueError, AttributeError, TypeError):
                continue  # a template the checks above cannot read; the rollout reports it
            longest = max(longest, len(system) + len(user) + len(agent.response_prefix))
    return longest // 3 + 16  # + the chat template's role markers


def available_memory(device: str) -> tuple[float, str]:
    """(free bytes, where) on the device a run uses: CUDA's free memory, else the host's."""
    import torch

    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        free, _ = torch.cuda.mem_get_info(index)
        return float(free), f"cuda:{index}"
    try:
        import psutil

        return float(psutil.virtual_memory().available), "host RAM"
    except ImportError:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return float(info["MemAvailable"].strip().split()[0]) * 1024, "host RAM"


def check_fits(est: Estimate, available: tuple[float, str]) -> None:
    free, where = available
    if est.total > free:
        raise ConfigError(
            f"this config needs an estimated {est.describe()} per step, but only "
            f"{free / GiB:.1f} GiB is free on {where}: lower algorithm.num_generations, "
            "train.prompts_per_step or max_completion_length, or set "
            "train.max_tokens_per_micro_batch"
        )


def describe_setting(cfg, task) -> list[str]:
    """The resolved setting of a run in a few lines: what ``--dry-run`` prints. The reward is
    called once on a dummy joint action, but an app's: its episodes are the user's program,
    which calls the team's endpoint (no model here), and how many calls they make is theirs."""
    from teamrl.apps.task import AppEnv
    from teamrl.config.policy_map import policy_agents
    from teamrl.config.step_shape import step_shape

    a, t = cfg.algorithm, cfg.train
    splits = ", ".join(f"{len(getattr(task, s) or ())} {s}" for s in ("train", "eval", "test"))
    policies = policy_agents(cfg)
    head = [
        f"task {task.name}: rows {splits}; agents {', '.join(a_.name for a_ in cfg.team.agents)}",
        f"model {cfg.model.name_or_path}; team.policies={cfg.team.policies}: "
        + ", ".join(f"policy {p} for {', '.join(ag)}" for p, ag in policies.items()),
    ]
    if isinstance(task.make_env(), AppEnv):
        return head + [
            f"algorithm {a.name} (app_groups={a.app_groups}): {t.prompts_per_step} prompt(s) a "
            f"step x {a.num_generations} episodes of the app; {t.max_steps} steps",
            "per step: every call an episode makes is a sample of the agent it names (how many "
            "calls: the app's)",
            "the reward: the app's own, returned by its episodes, which call the team's "
            "endpoint (run by train, not here: no model)",
        ]
    shape = step_shape(cfg)
    step = check_reward(cfg, task)
    parts = ", ".join(f"{k} {v:.3g}" for k, v in step.reward_components.items())
    return head + [
        f"algorithm {a.name}: {t.prompts_per_step} prompt(s) a step x {a.num_generations} "
        f"generations; up to {cfg.env.max_turns} turn(s); {t.max_steps} steps",
        f"per step: {shape.samples} samples to train on, {shape.generation_rows} rows in the "
        f"largest generate call, {shape.env_steps} env steps (no early stop)",
        f"the reward on every agent replying {DUMMY_REPLY!r} (train row 0): "
        f"{step.reward:.4g}" + (f" ({parts})" if parts else ""),
    ]
