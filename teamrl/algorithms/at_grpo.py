"""AT-GRPO: an agent-turn tree per problem, sequential turns, K branches per (turn, agent) node,
groups (problem, slot, turn, agent); and the independent episodes that trajectory GRPO trains on
and every sequential team is evaluated on.

Read top to bottom: the tree's nodes and episodes, branch selection, the lookahead that scores a
candidate on its own successor, the rollout (``sequential_rollout``: branching for AT-GRPO, not
for trajectory GRPO), the returns, the metrics, and the recipe (``AT_GRPO``). Evaluation never
branches (a branch chosen by its reward would be an oracle at test time): ``eval_rollout`` runs
independent episodes.

Agent-turn tree (one state per problem; K branches per (turn, agent) node):

    for t in turns:
        for agent i in turn_order:                   # i sees what agents < i did this turn
            K candidates a_k ~ pi_i(. | o_i)          # one generate call for all problems
            out_k = env_k.step({i: a_k}), env_k = clone(env)   # each on its OWN successor
            r_k = alpha * team(out_k) + local_i(out_k)
            group (problem, t, i) <- K samples        # recorded before termination is checked
            k* = select(r)   (greedy | sample ~ softmax(r / tau) | random)
            env = env_{k*};  stop the problem if out_{k*} ended the episode

Optional ``discount`` (None = off: R_k = r_k): a candidate's return adds the discounted later
rewards of the same agent along the chosen path, R_k = r_k + sum_{t' > t} gamma^(t' - t)
r*_{t', i}. With tree sampling that continuation is shared by all K candidates, so it shifts a
group by a constant: centring removes it; it matters for baseline 'raw' without scaling, and
rescales under 'batch' scaling.

Trajectory GRPO (the paper's baseline): K independent episodes per problem, no branching, every
sample of every turn kept (also those of episodes that end early), each credited with its
episode's return, grouped by problem; the baseline is taken over episodes, not samples.

Both fix the reference code's defects: rewards are computed on each branch's own successor,
the continuing state is the selected branch's, the last agent's samples are always recorded,
and group keys never merge problems.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass, field

import numpy as np

from teamrl.algorithms.recipe import Recipe, common_args
from teamrl.config.step_shape import agent_turn_shape
from teamrl.envs.base import Env, Step, clone
from teamrl.rollout.common import EnvRunner, RolloutResult
from teamrl.rollout.summary import Outcome, episode_summary, means, sample_metrics
from teamrl.sample import Sample
from teamrl.team.policies import Team


def turn_order(env: Env) -> list[str]:
    order = getattr(env, "turn_order", None)
    if order:
        return list(order)
    if len(env.agents) == 1:
        return list(env.agents)
    raise ValueError(
        f"AT-GRPO needs a sequential env: {type(env).__name__} has {len(env.agents)} agents "
        "and no turn_order (use algorithm.name=magrpo for simultaneous turns)"
    )


def select_branch(rewards: list[float], rule: str, temperature: float, rng: random.Random) -> int:
    """Index of the branch that continues."""
    if rule == "greedy":  # ties broken at random, so no position is favoured
        best = max(rewards)
        return rng.choice([k for k, r in enumerate(rewards) if r == best])
    if rule == "sample":
        m = max(rewards)
        weights = [math.exp((r - m) / max(temperature, 1e-8)) for r in rewards]
        return rng.choices(range(len(rewards)), weights=weights)[0]
    if rule == "random":
        return rng.randrange(len(rewards))
    raise ValueError(f"algorithm.selection: expected greedy|sample|random, got {rule!r}")


@dataclass
class TurnNode:
    """One (turn, agent) node of an agent-turn tree: what the critics need of it."""

    slot: int  # the episode's place in the step's batch
    turn: int
    agent: str  # the agent that acted
    samples: list[Sample]  # its K candidates, one per branch
    chosen: int  # the branch that continued
    observations: dict[str, str]  # every agent's observation before it acted (MAAC reads them)


@dataclass
class Episode:
    problem: int  # dataset index of the example
    slot: int  # position of the example in this step's batch (an example may appear twice)
    example: dict
    env: Env
    observations: dict[str, str]
    index: int = 0  # episode number within its problem (trajectory GRPO)
    done: bool = False
    outcome: Outcome = field(default_factory=Outcome)  # success, turns, team return, components
    path: list[tuple[str, float]] = field(default_factory=list)  # (agent, mixed reward) chosen
    samples: list[Sample] = field(default_factory=list)
    nodes: list[TurnNode] = field(default_factory=list)  # branching only, chronological


def _mixed(step: Step, agent: str, alpha: float) -> tuple[float, float, float]:
    local = float(step.local_rewards.get(agent, 0.0))
    return alpha * float(step.reward) + local, float(step.reward), local


def _lookahead(
    team: Team,
    work: list,
    steps: list[Step],
    later: list[str],
    greedy: bool,
    turn: int,
    ignore_eos: bool,
    pool: EnvRunner,
) -> float:
    """Score pending candidates by finishing the turn on a copy: one sample per later agent.

    Replaces each pending step's reward (and the acting agent's local reward) with those of
    the completed turn; the branch's own env stays pending, so the real later agents still act
    on it. Returns the seconds spent generating.
    """
    idx = [i for i, st in enumerate(steps) if st.pending]
    envs = {i: clone(work[i][4]) for i in idx}
    obs = {i: steps[i].observations for i in idx}
    final: dict[int, Step] = {}
    t_gen = 0.0
    for agent in later:
        t0 = time.perf_counter()
        jobs = []
        for i in idx:
            ids = team.encode_prompt(agent, obs[i][agent], work[i][0].example)
            jobs.append((agent, team.request(agent, ids, 1, greedy=greedy)))
        gens = team.generate(jobs, ignore_eos=ignore_eos)
        t_gen += time.perf_counter() - t0
        for i, gen in zip(idx, gens):
            text = team.decode(agent, gen[0].completion_ids)
            where = f"example {work[i][0].problem}, turn {turn}, lookahead {agent}"
            final[i] = pool.step(envs[i], {agent: text}, where)
            obs[i] = final[i].observations
    for i in idx:
        acting = next(iter(work[i][6]))
        own, done = steps[i], final[i]
        # The candidate's team reward is the completed turn's; its local reward is the one the
        # closing step assigns to it, else the one its own step gave.
        local = done.local_rewards.get(acting, own.local_rewards.get(acting, 0.0))
        steps[i] = dataclasses.replace(
            own,
            reward=done.reward,
            terminations={},
            truncations={},
            local_rewards={acting: local},
            infos=dict(own.infos),
            lookahead=True,
        )
    return t_gen


def agent_turn_rollout(team: Team, make_env, examples: list[tuple[int, dict]], **options):
    """AT-GRPO: one state per problem, K branches per (turn, agent) node, one continues.
    ``options``: the keyword arguments of ``sequential_rollout``."""
    return sequential_rollout(team, make_env, examples, branching=True, **options)


def trajectory_rollout(team: Team, make_env, examples: list[tuple[int, dict]], **options):
    """Trajectory GRPO: K independent episodes per problem, grouped by problem.
    ``options``: the keyword arguments of ``sequential_rollout`` (no selection: nothing
    branches)."""
    return sequential_rollout(team, make_env, examples, branching=False, **options)


def sequential_rollout(
    team: Team,
    make_env,
    examples: list[tuple[int, dict]],
    *,
    branching: bool,
    num_generations: int,
    max_turns: int,
    selection: str = "greedy",
    selection_temperature: float = 1.0,
    alpha: float = 1.0,
    discount: float | None = None,
    greedy: bool = False,
    reward_workers: int = 1,
    step_timeout: float = 0.0,
    seed: int = 0,
    ignore_eos: bool = False,
) -> RolloutResult:
    """``branching``: K candidates per node, each on its own copy, one continues (AT-GRPO).
    Otherwise K independent episodes per problem, one candidate per node (trajectory GRPO)."""
    k_branches = 1 if greedy else num_generations
    rng = random.Random(seed)
    pool = EnvRunner(reward_workers, step_timeout)
    copies = 1 if (branching or greedy) else num_generations
    episodes = []
    for slot, (problem, example) in enumerate(examples):
        for c in range(copies):
            env = make_env()
            obs = env.reset(example)
            episodes.append(Episode(problem, slot, example, env, obs, index=c))
    order = turn_order(episodes[0].env)
    n = k_branches if branching else 1  # samples drawn per episode per node
    t_gen = t_env = 0.0
    n_tokens = 0
    for turn in range(max_turns):
        for agent in order:
            live = [ep for ep in episodes if not ep.done]
            if not live:
                break
            # 1. One generate call per engine: every live episode, n candidates each.
            t0 = time.perf_counter()
            jobs = []
            for ep in live:
                if agent not in ep.observations:
                    raise ValueError(
                        f"example {ep.problem}, turn {turn}: env gave no observation for {agent!r}"
                    )
                ids = team.encode_prompt(agent, ep.observations[agent], ep.example)
                jobs.append((agent, team.request(agent, ids, n, greedy=greedy)))
            gens = team.generate(jobs, ignore_eos=ignore_eos)
            t_gen += time.perf_counter() - t0

            # 2. Every candidate on its own copy of the state.
            t0 = time.perf_counter()
            work = []
            for ep, cands in zip(live, gens):
                for k, gen in enumerate(cands):
                    text = team.decode(agent, gen.completion_ids)
                    where = f"example {ep.problem}, turn {turn}, agent {agent}, candidate {k}"
                    env = clone(ep.env) if branching else ep.env
                    work.append((ep, k, gen, text, env, where, {agent: text}))
                    n_tokens += len(gen.completion_ids)
            steps = pool.map(lambda w: pool.step(w[4], w[6], w[5]), work)
            t_env += time.perf_counter() - t0
            if branching and k_branches > 1 and any(st.pending for st in steps):
                later = order[order.index(agent) + 1 :]
                t_gen += _lookahead(team, work, steps, later, greedy, turn, ignore_eos, pool)

            # 3. Record the group, then select the branch that continues.
            by_ep: dict[int, list] = {}
            for w, st in zip(work, steps):
                by_ep.setdefault(id(w[0]), []).append((w, st))
            for ep in live:
                branch = by_ep[id(ep)]
                mixed = [_mixed(st, agent, alpha) for _, st in branch]
                # (problem, turn, agent); the batch slot keeps a repeated example's trees apart
                group = (ep.problem, ep.slot, turn, agent) if branching else (ep.problem, ep.slot)
                new = []
                for ((_, _, gen, text, *_), _), (r, team_r, local) in zip(branch, mixed):
                    new.append(
                        Sample(
                            agent=agent,
                            policy=team.policy_of[agent],
                            turn=turn,
                            group=group,
                            prompt_ids=gen.prompt_ids,
                            completion_ids=gen.completion_ids,
                            sampler_logprobs=gen.logprobs,
                            truncated=gen.truncated,
                            temperature=1.0 if greedy else team.agents[agent].temperature,
                            reward=r,
                            text=text,
                            episode=None if branching else (ep.problem, ep.slot, ep.index),
                            team_reward=team_r,
                            local_reward=local,
                        )
                    )
                ep.samples.extend(new)
                pick = (
                    select_branch([m[0] for m in mixed], selection, selection_temperature, rng)
                    if branching
                    else 0
                )
                ep.outcome.turns = turn + 1
                if branching:
                    ep.nodes.append(TurnNode(ep.slot, turn, agent, new, pick, ep.observations))
                (w, st) = branch[pick]
                ep.env, ep.observations = w[4], st.observations
                ep.path.append((agent, mixed[pick][0]))
                ep.outcome.record(st)
                if st.done:
                    ep.done = True
    _assign_returns(episodes, branching, discount)
    samples = [s for ep in episodes for s in ep.samples]
    _check_groups(samples, k_branches if branching else copies, branching)
    stats = {"time/generate": t_gen, "time/reward": t_env, "tokens/generated": float(n_tokens)}
    metrics = {**episode_metrics(episodes, samples, order), **pool.metrics()}
    summaries = [
        episode_summary(ep.problem, ep.outcome, sum(r for _, r in ep.path), episode=ep.index)
        for ep in episodes
    ]
    return RolloutResult(
        samples=samples,
        stats=stats,
        metrics=metrics,
        episodes=summaries,
        turn_nodes=[ep.nodes for ep in episodes] if branching else [],
    )


def _check_groups(samples: list[Sample], expected: int, branching: bool) -> None:
    """Every group holds K samples (branching) or samples of exactly K episodes (trajectory GRPO)."""
    members: dict[tuple, set] = {}
    for i, s in enumerate(samples):
        members.setdefault(s.group, set()).add(i if branching else s.episode)
    for group, m in members.items():
        if len(m) != expected:
            what = "samples" if branching else "episodes"
            raise AssertionError(f"group {group} has {len(m)} {what}, expected {expected}")


def _assign_returns(episodes: list[Episode], branching: bool, gamma: float | None) -> None:
    for ep in episodes:
        if not branching:  # trajectory GRPO: every sample carries its episode's return
            total = sum(r for _, r in ep.path)
            for s in ep.samples:
                s.return_ = total
            continue
        if gamma is None:  # AT-GRPO's default: a candidate is judged by its own reward
            for smp in ep.samples:
                smp.return_ = smp.reward
            continue
        # return-to-go of the same agent along the chosen path (constant within a group)
        nodes: dict[tuple[int, str], list[Sample]] = {}
        for smp in ep.samples:  # chronological; ep.path holds the chosen reward of each node
            nodes.setdefault((smp.turn, smp.agent), []).append(smp)
        future: dict[str, float] = {}
        for ((_, agent), group), (_, chosen) in reversed(list(zip(nodes.items(), ep.path))):
            f = future.get(agent, 0.0)
            for smp in group:
                smp.return_ = smp.reward + gamma * f
            future[agent] = chosen + gamma * f


def episode_metrics(episodes: list[Episode], samples: list[Sample], agents: list[str]) -> dict:
    m: dict[str, float] = {}
    m["reward/mean"] = float(np.mean([sum(r for _, r in ep.path) for ep in episodes]))
    m["reward/std"] = float(np.std([sum(r for _, r in ep.path) for ep in episodes]))
    m["reward/team/mean"] = float(np.mean([ep.outcome.team_return for ep in episodes]))
    succ = [ep.outcome.success for ep in episodes if ep.outcome.success is not None]
    if succ:
        m["success_rate"] = float(np.mean(succ))
    m["turns/mean"] = float(np.mean([ep.outcome.turns for ep in episodes]))
    per_turn: dict[int, list[float]] = {}
    for s in samples:
        per_turn.setdefault(s.turn, []).append(s.reward)
    m.update(means("reward/turn_", per_turn, "/mean"))
    comps: dict[str, list[float]] = {}
    for ep in episodes:
        for k, vs in ep.outcome.components.items():
            comps.setdefault(k, []).extend(vs)
    m.update(means("reward/components/", comps))
    m.update(sample_metrics(samples, agents))
    for a in agents:
        mine = [s for s in samples if s.agent == a]
        if mine:
            m[f"reward/team/{a}/mean"] = float(np.mean([s.team_reward for s in mine]))
            m[f"reward/local/{a}/mean"] = float(np.mean([s.local_reward for s in mine]))
    m["terminated_fraction"] = float(np.mean([ep.done for ep in episodes]))
    return m


# ------------------------------------------------------------------------------- the recipe
DEFAULTS = {"discount": None}  # None: a candidate's return is its own reward


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    a = cfg.algorithm
    k = 1 if single_path else a.num_generations
    result = agent_turn_rollout(
        team, make_env, examples, **common_args(cfg, k, greedy), seed=cfg.seed * 100_003 + step,
        selection=a.selection, selection_temperature=a.selection_temperature,
        alpha=a.alpha, discount=a.discount,
    )  # fmt: skip
    regroup(result.samples, a.group_by)
    return result


def regroup(samples, group_by) -> None:
    """The grouping ablation: keep (problem, slot) and only the named keys of turn and agent.

    (problem, slot, turn, agent) -> e.g. (problem, slot, agent) for ``group_by=['agent']``, so
    one group pools the K branches of every node of that agent. ``None`` keeps all four.
    """
    if group_by is None:
        return
    keep = [i for name, i in (("turn", 2), ("agent", 3)) if name in group_by]
    for s in samples:
        s.group = s.group[:2] + tuple(s.group[i] for i in keep)


def eval_rollout(team, make_env, examples, cfg, *, n: int, greedy: bool):
    args = common_args(cfg, n, greedy)
    return trajectory_rollout(
        team, make_env, examples, **args, alpha=cfg.algorithm.alpha, seed=cfg.seed
    )


AT_GRPO = Recipe(
    "at_grpo",
    ("problem", "slot", "turn", "agent"),
    rollout,
    eval_rollout,
    DEFAULTS,
    agent_turn_shape,
)
