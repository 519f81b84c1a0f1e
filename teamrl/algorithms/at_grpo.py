"""AT-GRPO: an agent-turn tree per problem, sequential turns, K branches per (turn, agent) node,
groups (problem, slot, turn, agent); and the independent episodes that trajectory GRPO trains on
and every sequential team is evaluated on.

Read top to bottom: branch selection, the tree's episodes (its nodes, ``TurnNode``, are
``teamrl.rollout.trees``'s, where the critics read them) and the values the phases
pass on (``Candidate``, ``Branch``, ``MixedReward``), the rollout (``sequential_rollout``:
branching for AT-GRPO, not for trajectory GRPO) and its phases in order (the lookahead that
scores a pending candidate among them), the returns, the metrics, and the recipe (``AT_GRPO``). Evaluation never
branches (a branch chosen by its reward would be an oracle at test time): ``eval_rollout`` runs
independent episodes.

Agent-turn tree (one state per problem; K branches per (turn, agent) node), each line with the
phase of ``sequential_rollout`` that does it:

    episodes <- a fresh env reset to each example                                 _start_episodes
    for t in turns:
        for agent i in turn_order:        # i sees what agents < i did this turn
            K candidates a_k ~ pi_i(. | o_i)   # one generate call, all problems  _generate
            env_k = clone(env)                 # each on its OWN successor        _candidates
            out_k = env_k.step({i: a_k})
            pending out_k: scored on its turn, finished on a copy                 _lookahead
            r_k = alpha * team(out_k) + local_i(out_k)
            group (problem, t, i) <- K samples # before termination is checked    _record_group
            k* = select(r)   (greedy | sample ~ softmax(r / tau) | random)        select_branch
            env = env_{k*}; stop the problem if out_{k*} ended the episode        _follow
    returns (below), then the metrics                                             _assign_returns

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
import functools
import math
import random
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from teamrl.algorithms.recipe import Recipe, common_args
from teamrl.config.step_shape import agent_turn_shape
from teamrl.envs.base import Env, Step, clone
from teamrl.generation import Generation
from teamrl.rollout.common import EnvError, EnvRunner, RolloutClock, RolloutResult, reset_env
from teamrl.rollout.summary import Outcome, episode_summary, means, sample_metrics
from teamrl.rollout.trees import TurnNode
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


class PathStep(NamedTuple):
    """One node of an episode's chosen path: the agent that acted and the reward the chosen
    candidate was credited with (alpha * team + local)."""

    agent: str
    reward: float


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
    path: list[PathStep] = field(default_factory=list)  # the chosen candidate of every node
    samples: list[Sample] = field(default_factory=list)
    nodes: list[TurnNode] = field(default_factory=list)  # branching only, chronological

    @property
    def path_return(self) -> float:
        """The sum of the chosen rewards along the path: the episode's return."""
        return sum(step.reward for step in self.path)


class Candidate(NamedTuple):
    """Candidate ``index`` of ``agent`` in ``episode``, before its step: its generation, its
    text, the env it is stepped on (its own copy when branching, else the episode's env) and
    ``where`` (the example, turn, agent and candidate, for error messages)."""

    episode: Episode
    index: int
    agent: str
    gen: Generation
    text: str
    env: Env
    where: str


class Branch(NamedTuple):
    """A stepped candidate: the candidate and the step its action returned (scored on the
    completed turn when the step was pending and the lookahead ran)."""

    candidate: Candidate
    step: Step


class MixedReward(NamedTuple):
    """A candidate's credit from its step: ``reward`` = alpha * ``team`` + ``local`` (the
    acting agent's ``local_rewards`` term, 0 when the step gave none)."""

    reward: float
    team: float
    local: float


def _mixed(step: Step, agent: str, alpha: float) -> MixedReward:
    local = float(step.local_rewards.get(agent, 0.0))
    return MixedReward(alpha * float(step.reward) + local, float(step.reward), local)


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
    copies = 1 if (branching or greedy) else num_generations  # episodes per problem
    n = k_branches if branching else 1  # candidates drawn per episode per node
    rng = random.Random(seed)  # the selection's draws, in episode order at every node
    choose = functools.partial(
        select_branch, rule=selection, temperature=selection_temperature, rng=rng
    )
    clock, pool = RolloutClock(), EnvRunner(reward_workers, step_timeout)
    episodes = _start_episodes(make_env, examples, copies)
    order = turn_order(episodes[0].env)
    for turn in range(max_turns):
        for agent in order:
            live = [ep for ep in episodes if not ep.done]
            if not live:
                break
            with clock.generating():
                gens = _generate(team, live, agent, turn, n, greedy, ignore_eos)
            with clock.stepping():
                candidates = _candidates(team, live, gens, agent, turn, branching)
                steps = pool.map(lambda c: pool.step(c.env, {c.agent: c.text}, c.where), candidates)
            clock.tokens += sum(len(c.gen.completion_ids) for c in candidates)
            if branching and k_branches > 1 and any(st.pending for st in steps):
                later = order[order.index(agent) + 1 :]
                _lookahead(team, candidates, steps, later, greedy, turn, ignore_eos, pool, clock)
            for ep, branches in zip(live, _by_episode(live, candidates, steps)):
                group = _record_group(team, ep, branches, agent, turn, alpha, branching, greedy)
                pick = choose([s.reward for s in group]) if branching else 0  # k* from r_k
                _follow(ep, branches[pick], group, pick, agent, turn, branching)
    _assign_returns(episodes, branching, discount)
    samples = [s for ep in episodes for s in ep.samples]
    _check_groups(samples, k_branches if branching else copies, branching)
    return RolloutResult(
        samples=samples,
        stats=clock.stats(),
        metrics={**episode_metrics(episodes, samples, order), **pool.metrics()},
        episodes=[
            episode_summary(ep.problem, ep.outcome, ep.path_return, episode=ep.index)
            for ep in episodes
        ],
        turn_nodes=[ep.nodes for ep in episodes] if branching else [],
    )


def _start_episodes(make_env, examples: list[tuple[int, dict]], copies: int) -> list[Episode]:
    """``copies`` episodes per example, in the batch's order, each on a fresh env reset to it."""
    episodes = []
    for slot, (problem, example) in enumerate(examples):
        for c in range(copies):
            env = make_env()
            obs = reset_env(env, example, f"example {problem}, reset")
            episodes.append(Episode(problem, slot, example, env, obs, index=c))
    return episodes


def _generate(
    team: Team,
    live: list[Episode],
    agent: str,
    turn: int,
    n: int,
    greedy: bool,
    ignore_eos: bool,
) -> list[list[Generation]]:
    """``n`` generations of ``agent`` per live episode, from its observation: one generate
    call per engine for every problem."""
    jobs = []
    for ep in live:
        if agent not in ep.observations:
            raise EnvError(
                f"example {ep.problem}, turn {turn}: env gave no observation for {agent!r}"
            )
        ids = team.encode_prompt(agent, ep.observations[agent], ep.example)
        jobs.append((agent, team.request(agent, ids, n, greedy=greedy)))
    return team.generate(jobs, ignore_eos=ignore_eos)


def _candidates(
    team: Team,
    live: list[Episode],
    gens: list[list[Generation]],
    agent: str,
    turn: int,
    branching: bool,
) -> list[Candidate]:
    """Every generation as a candidate, episode by episode: each on its own copy of the
    episode's env when branching (a candidate is scored on its OWN successor), else on the
    episode's env itself (one candidate, nothing to copy)."""
    out = []
    for ep, cands in zip(live, gens):
        for k, gen in enumerate(cands):
            text = team.decode(agent, gen.completion_ids)
            where = f"example {ep.problem}, turn {turn}, agent {agent}, candidate {k}"
            env = clone(ep.env) if branching else ep.env
            out.append(Candidate(ep, k, agent, gen, text, env, where))
    return out


def _lookahead(
    team: Team,
    candidates: list[Candidate],
    steps: list[Step],
    later: list[str],
    greedy: bool,
    turn: int,
    ignore_eos: bool,
    pool: EnvRunner,
    clock: RolloutClock,
) -> None:
    """Score pending candidates by finishing the turn on a copy: one sample per later agent.

    Replaces each pending step's reward (and the acting agent's local reward) with those of
    the completed turn (``_scored_on_turn``); the branch's own env stays pending, so the real
    later agents still act on it. The generation time goes to ``clock``.
    """
    pending = [i for i, st in enumerate(steps) if st.pending]
    final = _finish_turn(
        team, candidates, steps, pending, later, greedy, turn, ignore_eos, pool, clock
    )
    for i in pending:
        steps[i] = _scored_on_turn(steps[i], final[i], candidates[i].agent)


def _finish_turn(
    team: Team,
    candidates: list[Candidate],
    steps: list[Step],
    pending: list[int],
    later: list[str],
    greedy: bool,
    turn: int,
    ignore_eos: bool,
    pool: EnvRunner,
    clock: RolloutClock,
) -> dict[int, Step]:
    """The closing step of the turn for each pending candidate ``i``: on a copy of its env,
    every later agent acts once (one generate call per engine per agent), seeing what the
    agents before it did. Returns candidate index -> the last later agent's step."""
    envs = {i: clone(candidates[i].env) for i in pending}
    obs = {i: steps[i].observations for i in pending}
    final: dict[int, Step] = {}
    for agent in later:
        with clock.generating():
            jobs = []
            for i in pending:
                ids = team.encode_prompt(agent, obs[i][agent], candidates[i].episode.example)
                jobs.append((agent, team.request(agent, ids, 1, greedy=greedy)))
            gens = team.generate(jobs, ignore_eos=ignore_eos)
        for i, outs in zip(pending, gens):  # one generation each
            text = team.decode(agent, outs[0].completion_ids)
            where = f"example {candidates[i].episode.problem}, turn {turn}, lookahead {agent}"
            final[i] = pool.step(envs[i], {agent: text}, where)
            obs[i] = final[i].observations
    return final


def _scored_on_turn(own: Step, closing: Step, acting: str) -> Step:
    """The pending step ``own`` of agent ``acting``, scored by the turn's ``closing`` step.

    The candidate's team reward is the completed turn's; its local reward is the one the
    closing step assigns to it, else the one its own step gave. It ends nothing (the real turn
    goes on from ``own``'s env) and is marked ``lookahead``: the episode's outcome does not
    count its reward as real (``Outcome.record``).
    """
    local = closing.local_rewards.get(acting, own.local_rewards.get(acting, 0.0))
    return dataclasses.replace(
        own,
        reward=closing.reward,
        terminations={},
        truncations={},
        local_rewards={acting: local},
        infos=dict(own.infos),
        lookahead=True,
    )


def _by_episode(
    live: list[Episode], candidates: list[Candidate], steps: list[Step]
) -> list[list[Branch]]:
    """The stepped candidates of each live episode, in the order of ``live``."""
    branches: dict[int, list[Branch]] = {}
    for c, st in zip(candidates, steps):
        branches.setdefault(id(c.episode), []).append(Branch(c, st))
    return [branches[id(ep)] for ep in live]


def _record_group(
    team: Team,
    ep: Episode,
    branches: list[Branch],
    agent: str,
    turn: int,
    alpha: float,
    branching: bool,
    greedy: bool,
) -> list[Sample]:
    """The node's candidates as samples of one group, appended to the episode's samples and
    returned. Candidate k is credited with r_k = alpha * team + local of its own step;
    recorded before termination is checked, so an episode's last node is kept too."""
    # (problem, turn, agent); the batch slot keeps a repeated example's trees apart
    group = (ep.problem, ep.slot, turn, agent) if branching else (ep.problem, ep.slot)
    new = []
    for b in branches:
        r = _mixed(b.step, agent, alpha)
        gen = b.candidate.gen
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
                reward=r.reward,
                text=b.candidate.text,
                episode=None if branching else (ep.problem, ep.slot, ep.index),
                team_reward=r.team,
                local_reward=r.local,
            )
        )
    ep.samples.extend(new)
    return new


def _follow(
    ep: Episode,
    chosen: Branch,
    group: list[Sample],
    pick: int,
    agent: str,
    turn: int,
    branching: bool,
) -> None:
    """Continue ``ep`` from its ``chosen`` branch (candidate ``pick`` of ``group``): record the
    node (branching), take the branch's env and observations, extend the path and the outcome,
    and end the episode if the branch's step ended it."""
    ep.outcome.turns = turn + 1
    if branching:  # the observations before the agent acted: what MAAC's central value reads
        ep.nodes.append(TurnNode(ep.slot, turn, agent, group, pick, ep.observations))
        for k, s in enumerate(group):  # the tree position (samples.jsonl, teamrl report)
            s.info.update(candidate=k, continued=k == pick)
    ep.env, ep.observations = chosen.candidate.env, chosen.step.observations
    ep.path.append(PathStep(agent, group[pick].reward))
    ep.outcome.record(chosen.step)
    if chosen.step.done:
        ep.done = True


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
            total = ep.path_return
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
        for ((_, agent), group), chosen in reversed(list(zip(nodes.items(), ep.path))):
            f = future.get(agent, 0.0)
            for smp in group:
                smp.return_ = smp.reward + gamma * f
            future[agent] = chosen.reward + gamma * f


def episode_metrics(episodes: list[Episode], samples: list[Sample], agents: list[str]) -> dict:
    m: dict[str, float] = {}
    m["reward/mean"] = float(np.mean([ep.path_return for ep in episodes]))
    m["reward/std"] = float(np.std([ep.path_return for ep in episodes]))
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
