"""An app as the rollout (``algorithm.name=app``): K episodes per problem of the user's program,
which calls the team through its OpenAI-compatible endpoint (``teamrl.apps``); every call it
makes is one ``Sample`` of the agent its ``model`` names.

Read top to bottom: the rollout (the episodes, then their calls as samples), the groups and
returns of each ``algorithm.app_groups``, the metrics, and the recipe.

Groups and returns, for the K episodes e of problem p (slot s), team reward T_e and local
rewards L_e^a (zero when the episode returns none), alpha = ``algorithm.alpha``:

    call     group (p, s, agent a, k): a's k-th call in each episode that made one;
             return alpha * T_e + L_e^a (T_e alone when the episode gave no local rewards)
    episode  group (p, s), ``Sample.episode`` = (p, s, e): every call of an episode returns
             T_e, and the baseline is taken over episodes (trajectory GRPO)
    joint    group (p, s, "root", a): MAGRPO's aligned groups; every episode must make exactly
             one call per agent; return as 'call'

Calls whose count differs between episodes leave some 'call' groups smaller than K; an agent
that never speaks in an episode has no sample there. A group left with fewer than two
episodes has no baseline: its samples are dropped and counted (``app/dropped_samples``), and
a step where every group is dropped is an error naming the cause.
"""

from __future__ import annotations

import time

import numpy as np

from teamrl.algorithms.recipe import Recipe
from teamrl.apps.endpoint import require_apps
from teamrl.apps.episodes import EpisodeRecord, run_episodes
from teamrl.apps.task import AppEnv
from teamrl.config import ConfigError, EndpointConfig
from teamrl.config.step_shape import agent_turn_shape
from teamrl.rollout.common import RewardError, RolloutClock, RolloutResult
from teamrl.rollout.summary import Outcome, episode_summary, means, sample_metrics
from teamrl.sample import Sample
from teamrl.team.policies import Team


def app_rollout(
    team: Team,
    make_env,
    examples: list[tuple[int, dict]],
    *,
    num_generations: int,
    groups: str = "call",
    alpha: float = 1.0,
    greedy: bool = False,
    ignore_eos: bool = False,
    keep_small_groups: bool = False,
    timeout: float = 0.0,
    limits: EndpointConfig | None = None,
) -> RolloutResult:
    """K episodes per example (one when greedy), their calls as samples with groups and
    returns. ``keep_small_groups``: keep groups of one episode (evaluation, which never
    computes a baseline). ``timeout``: seconds the episodes may run their own code without a
    call or a return (``env.step_timeout``; 0: no limit). ``limits``: the endpoint's (the
    config's ``endpoint`` section)."""
    require_apps()
    env = app_env(make_env)
    k = 1 if greedy else num_generations
    clock, t0 = RolloutClock(), time.perf_counter()
    records = run_episodes(
        team, env, examples, k, greedy=greedy, ignore_eos=ignore_eos, clock=clock,
        timeout=timeout, limits=limits,
    )  # fmt: skip
    clock.reward += time.perf_counter() - t0 - clock.generate  # the app's own time
    if groups == "joint":
        check_one_call_each(records, list(team.agents))
    samples = [s for rec in records for s in episode_samples(team, rec, groups, alpha, greedy)]
    kept, dropped = (samples, 0) if keep_small_groups else drop_small_groups(samples)
    if not kept and not keep_small_groups:
        raise RewardError(no_group_message(records, len(samples)))
    return RolloutResult(
        samples=kept,
        stats=clock.stats(),
        metrics=app_metrics(records, kept, list(team.agents), dropped),
        episodes=[summary(rec) for rec in records],
    )


def app_env(make_env) -> AppEnv:
    """The task's ``AppEnv``, or one line saying why this task cannot run as an app."""
    env = make_env()
    if isinstance(env, AppEnv):
        return env
    if isinstance(getattr(env, "env", None), AppEnv):  # teamrl play --prompt wraps the env
        raise ConfigError(
            "an app task writes its own prompts: play it without --prompt (the app's messages "
            "are what the agents see)"
        )
    raise ConfigError(
        f"algorithm.name=app runs an app task (teamrl.apps.app_task), but the task's env is a "
        f"{type(env).__name__}: use algorithm.name=magrpo, at_grpo or grpo for an env"
    )


def check_one_call_each(records: list[EpisodeRecord], agents: list[str]) -> None:
    """app_groups=joint: every episode calls every agent exactly once."""
    for rec in records:
        counts = {a: sum(1 for c in rec.calls if c.agent == a) for a in agents}
        wrong = {a: n for a, n in counts.items() if n != 1}
        if wrong:
            raise RewardError(
                f"example {rec.problem} (slot {rec.slot}), episode {rec.index}: "
                f"algorithm.app_groups=joint needs exactly one call per agent per episode; "
                f"calls made: {counts} (use app_groups=call or episode for other apps)"
            )


def episode_samples(
    team: Team, rec: EpisodeRecord, groups: str, alpha: float, greedy: bool
) -> list[Sample]:
    """The episode's served calls as samples, in the order they were served."""
    out = []
    for call in rec.calls:
        a, gen = call.agent, call.generation
        local = rec.local_rewards.get(a, 0.0)
        mixed = alpha * rec.team_reward + local if rec.local_rewards else rec.team_reward
        reward = rec.team_reward if groups == "episode" else mixed
        out.append(
            Sample(
                agent=a,
                policy=team.policy_of[a],
                turn=call.index,
                group=group_of(rec, a, call.index, groups),
                prompt_ids=call.prompt_ids,
                completion_ids=gen.completion_ids,
                sampler_logprobs=gen.logprobs,
                truncated=gen.truncated,
                temperature=1.0 if greedy else team.agents[a].temperature,
                reward=reward,
                return_=reward,
                text=call.text,
                episode=(rec.problem, rec.slot, rec.index),
                team_reward=rec.team_reward,
                local_reward=local,
                info={"call": call.order, "episode_index": rec.index}
                | ({"weights": call.weights.record()} if call.weights else {}),
            )
        )
    return out


def group_of(rec: EpisodeRecord, agent: str, index: int, groups: str) -> tuple:
    if groups == "episode":
        return (rec.problem, rec.slot)
    if groups == "joint":
        return (rec.problem, rec.slot, "root", agent)
    return (rec.problem, rec.slot, agent, index)


def drop_small_groups(samples: list[Sample]) -> tuple[list[Sample], int]:
    """The samples of groups that hold two or more episodes, and how many were dropped."""
    episodes: dict = {}
    for s in samples:
        episodes.setdefault(s.group, set()).add(s.episode)
    kept = [s for s in samples if len(episodes[s.group]) >= 2]
    return kept, len(samples) - len(kept)


def no_group_message(records: list[EpisodeRecord], n_samples: int) -> str:
    calls = [len(r.calls) for r in records]
    if not any(calls):
        refused = sum(r.refused for r in records)
        why = f" ({refused} call(s) were refused: see the errors the app got)" if refused else ""
        return (
            f"no episode of this step made a call the endpoint served{why}: the episode must "
            "call the team through the client (or base_url) it is given"
        )
    return (
        f"none of this step's {n_samples} call(s) has a group of two or more episodes (calls "
        f"per episode: {calls}): every group needs the same agent's k-th call in at least two "
        "episodes of a problem (algorithm.num_generations >= 2), or use algorithm.app_groups="
        "episode"
    )


def summary(rec: EpisodeRecord) -> dict:
    """The episode as evaluation reads it. Its components (means over the evaluated episodes in
    ``teamrl eval``'s report) say what the team reward alone hides: ``local/<agent>``, the
    agent's local reward, and ``tool_calls/<agent>``, the share of the agent's calls that
    offered tools whose reply carried a valid tool call (no entry where none offered tools)."""
    outcome = Outcome(turns=len(rec.calls), team_return=rec.team_reward)
    for a, v in rec.local_rewards.items():
        outcome.components[f"local/{a}"] = [float(v)]
    for c in rec.calls:
        if c.tools_offered:
            outcome.components.setdefault(f"tool_calls/{c.agent}", []).append(
                float(c.tool_calls > 0)
            )
    return episode_summary(rec.problem, outcome, rec.team_reward, episode=rec.index)


def app_metrics(
    records: list[EpisodeRecord], samples: list[Sample], agents: list[str], dropped: int
) -> dict[str, float]:
    """Team reward over episodes, calls per episode, agents that never spoke, locals, tool
    calls, and the staleness of the weights that answered (asynchronous training)."""
    m: dict[str, float] = {}
    team = [r.team_reward for r in records]
    m["reward/mean"] = float(np.mean(team))
    m["reward/std"] = float(np.std(team))
    m["turns/mean"] = float(np.mean([len(r.calls) for r in records]))
    m.update(sample_metrics(samples, agents) if samples else {})
    local: dict[str, list[float]] = {}
    for r in records:
        for a, v in r.local_rewards.items():
            local.setdefault(a, []).append(v)
    m.update(means("reward/local/", local, "/mean"))
    silent = sum(1 for r in records for a in agents if not any(c.agent == a for c in r.calls))
    m["app/silent_agents"] = float(silent)  # (episode, agent) pairs with no call
    m["app/refused_calls"] = float(sum(r.refused for r in records))
    m["app/unparsed_tool_calls"] = float(sum(r.unparsed_tool_calls for r in records))
    m.update(tool_call_shares(records, agents))
    m.update(staleness_metrics(records, agents))
    m["app/dropped_samples"] = float(dropped)
    m["terminated_fraction"] = 1.0
    return m


def tool_call_shares(records: list[EpisodeRecord], agents: list[str]) -> dict[str, float]:
    """``app/tool_calls/<agent>``: of the agent's calls that offered tools, the share whose
    reply carried at least one valid tool call (agents never offered tools: no entry)."""
    out = {}
    for a in agents:
        offered = [c for r in records for c in r.calls if c.agent == a and c.tools_offered]
        if offered:
            out[f"app/tool_calls/{a}"] = sum(c.tool_calls > 0 for c in offered) / len(offered)
    return out


def staleness_metrics(records: list[EpisodeRecord], agents: list[str]) -> dict[str, float]:
    """``app/staleness/<agent>/mean`` and ``/max``: optimizer steps between the weights that
    answered the agent's calls and its learner's (asynchronous training; teamrl.apps.provenance)."""
    out = {}
    for a in agents:
        gaps = [
            c.weights.staleness
            for r in records
            for c in r.calls
            if c.agent == a and c.weights is not None and c.weights.staleness is not None
        ]
        if gaps:
            out[f"app/staleness/{a}/mean"] = float(np.mean(gaps))
            out[f"app/staleness/{a}/max"] = float(max(gaps))
    return out


# ------------------------------------------------------------------------------- the recipe
DEFAULTS: dict = {}  # discount is unused: a call's return is its episode's reward


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    a = cfg.algorithm  # a critic is refused by the config's rules (no tree to read)
    return app_rollout(
        team, make_env, examples, num_generations=1 if single_path else a.num_generations,
        groups=a.app_groups, alpha=a.alpha, greedy=greedy, ignore_eos=cfg.team.ignore_eos,
        keep_small_groups=single_path, timeout=cfg.env.step_timeout, limits=cfg.endpoint,
    )  # fmt: skip


def eval_rollout(team, make_env, examples, cfg, *, n: int, greedy: bool):
    return app_rollout(
        team, make_env, examples, num_generations=n, groups=cfg.algorithm.app_groups,
        alpha=cfg.algorithm.alpha, greedy=greedy, ignore_eos=cfg.team.ignore_eos,
        keep_small_groups=True, timeout=cfg.env.step_timeout, limits=cfg.endpoint,
    )  # fmt: skip


APP = Recipe("app", ("problem", "slot", "agent", "call"), rollout, eval_rollout, DEFAULTS, agent_turn_shape)  # fmt: skip
