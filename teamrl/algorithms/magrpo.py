"""MAGRPO: a joint-action tree per problem, one team reward, groups (problem, slot, node, agent).

Read top to bottom: the rollout that grows the tree (``joint_rollout``) and its phases in
order, the returns computed on it (and the counterfactual baseline of the ``cross`` tree), the
step's metrics, and the recipe the trainer and the evaluator call (``MAGRPO``). The tree's node
(``Node``) is ``teamrl.rollout.trees``'s, where the critics read it too. Credit (the group
baselines, the critics) is ``teamrl.credit``; the update ``teamrl.update``.

The tree.

Each node holds an env state and every agent's observation. All agents act at once
(simultaneous turn): each samples G completions from its observation. Joint actions are

    aligned: K = G joint actions, the j-th completion of every agent;
    cross:   K = G^N joint actions, the Cartesian product.

Every joint action is applied to its own copy of the node's env; the transition's reward is
r_j and, unless the episode ends, its successor state becomes a child node (the next turn).
Returns are computed bottom-up:

    R_j = r_j + gamma * mean(R of the child's joint actions)      (R_j = r_j at a leaf)

An agent's completion g is credited with R_g (aligned) or with the marginal mean of R over the
joint actions that contain it (cross). With ``reward_per_agent`` the same recursion runs per
agent on c^a_j = alpha * r_j + local^a_j (the step's ``local_rewards``) and agent a is credited
from its own R^a; the team's R is still what metrics and evaluation report.
Group key: (problem, slot, node, agent), where ``slot`` is the example's position in the step's
batch: an example drawn twice in one step (an epoch wrapping mid-step, or prompts_per_step >
the dataset) grows two trees whose groups stay apart.

The rollout (``joint_rollout``), each line a phase:

    roots <- a fresh env reset to each example                        _reset_roots
    for t in turns, while the frontier holds nodes:
        G completions per (node, agent), one generate call per engine  _sample_completions
        every joint action stepped on its own copy of its node's env   _step_joint_actions
        successors that go on become the next frontier                 _grow_children
            (none on the last turn, none under a node whose mean r_j > threshold)
    R bottom-up, each completion's credit, the counterfactual (cross)  _credit_trees
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from teamrl.algorithms.recipe import Recipe, common_args
from teamrl.config.step_shape import joint_tree_shape
from teamrl.envs.base import Env, Step, clone
from teamrl.rollout.common import (
    EnvRunner,
    RolloutClock,
    RolloutResult,
    check_observations,
    reset_env,
)
from teamrl.rollout.summary import (
    Outcome,
    add_components,
    episode_summary,
    means,
    sample_metrics,
)
from teamrl.rollout.trees import Node, agent_credit, walk
from teamrl.sample import Sample
from teamrl.team.policies import Team


def joint_rollout(
    team: Team,
    make_env,
    examples: list[tuple[int, dict]],
    *,
    num_generations: int,
    max_turns: int,
    joint_mode: str = "aligned",
    discount: float = 1.0,
    early_termination_threshold: float | None = None,
    greedy: bool = False,
    reward_workers: int = 1,
    step_timeout: float = 0.0,
    ignore_eos: bool = False,
    alpha: float = 1.0,
    reward_per_agent: bool = False,
    counterfactual: bool = False,
) -> RolloutResult:
    """Grow one tree per example and return its samples with rewards and returns set.

    Each agent's completions are credited with the team reward, or with ``reward_per_agent``
    with ``alpha * team + local`` (the step's ``local_rewards`` term of that agent). With
    ``counterfactual`` (cross mode) each sample also gets its counterfactual advantage
    (``counterfactual_advantages``)."""
    agents = list(team.agents)
    g = 1 if greedy else num_generations
    cross = joint_mode == "cross" and not greedy  # one sample per agent has one joint action
    clock, pool = RolloutClock(), EnvRunner(reward_workers, step_timeout)
    roots = _reset_roots(make_env, examples, agents)
    frontier = list(roots)
    for turn in range(max_turns):
        if not frontier:
            break
        with clock.generating():
            clock.tokens += _sample_completions(team, frontier, agents, turn, g, greedy, ignore_eos)
        with clock.stepping():
            stepped = _step_joint_actions(frontier, agents, turn, g, cross, pool)
        last = turn + 1 >= max_turns
        frontier = _grow_children(
            frontier, stepped, agents, turn, last, early_termination_threshold
        )
    credit = agent_credit(reward_per_agent, alpha)
    samples = _credit_trees(roots, agents, discount, cross, credit, counterfactual)
    return RolloutResult(
        samples=samples,
        roots=roots,
        stats=clock.stats(),
        metrics={**rollout_metrics(roots, samples, agents), **pool.metrics()},
        episodes=[path_summary(root) for root in roots] if g == 1 else [],
    )


class JointAction(NamedTuple):
    """A joint action of a node, before its step: the copy of the node's env it is stepped on,
    every agent's action (its completion's text), and ``where`` (the example, turn, node and
    joint action, for error messages)."""

    env: Env
    actions: dict[str, str]
    where: str


class Transition(NamedTuple):
    """One joint action of a node, stepped: the env copy it was stepped on (from then on its
    successor state, the child's env if the episode goes on) and the step it returned."""

    env: Env
    step: Step


def _reset_roots(make_env, examples: list[tuple[int, dict]], agents: list[str]) -> list[Node]:
    """A root per example, in the batch's order: a fresh env reset to the example."""
    roots = []
    for slot, (problem, example) in enumerate(examples):
        env = make_env()
        obs = reset_env(env, example, f"example {problem}, reset")
        check_observations(obs, agents, f"reset(example {problem})")
        roots.append(
            Node(problem, slot, node_id="root", turn=0, env=env, observations=obs, example=example)
        )
    return roots


def _sample_completions(
    team: Team,
    frontier: list[Node],
    agents: list[str],
    turn: int,
    g: int,
    greedy: bool,
    ignore_eos: bool,
) -> int:
    """G completions of every agent at every node of the turn, in one generate call per
    engine, stored as the nodes' samples (group: problem, slot, node, agent). Returns the
    tokens generated."""
    jobs = []
    for node in frontier:
        for a in agents:
            ids = team.encode_prompt(a, node.observations[a], node.example)
            jobs.append((a, team.request(a, ids, g, greedy=greedy)))
    outs = iter(team.generate(jobs, ignore_eos=ignore_eos))
    tokens = 0
    for node in frontier:
        for a in agents:
            node.samples[a] = [
                Sample(
                    agent=a,
                    policy=team.policy_of[a],
                    turn=turn,
                    group=(node.problem, node.slot, node.node_id, a),
                    prompt_ids=gen.prompt_ids,
                    completion_ids=gen.completion_ids,
                    sampler_logprobs=gen.logprobs,
                    truncated=gen.truncated,
                    temperature=team.agents[a].temperature if not greedy else 1.0,
                    text=team.decode(a, gen.completion_ids),
                )
                for gen in next(outs)
            ]
            tokens += sum(len(s.completion_ids) for s in node.samples[a])
    return tokens


def joint_indices(g: int, n_agents: int, cross: bool) -> list[tuple[int, ...]]:
    """Per joint action, the index of each agent's completion: the j-th of every agent
    (aligned, G joint actions) or every combination (cross, G^N)."""
    if cross:
        return list(itertools.product(range(g), repeat=n_agents))
    return [(j,) * n_agents for j in range(g)]


def _step_joint_actions(
    frontier: list[Node],
    agents: list[str],
    turn: int,
    g: int,
    cross: bool,
    pool: EnvRunner,
) -> list[list[Transition]]:
    """Every joint action of every node (``node.joint``), each stepped on its own copy of its
    node's env, all of the turn's steps in one ``pool.map``. Returns, per node of the
    frontier, its joint actions' transitions in the order of ``node.joint``."""
    work: list[list[JointAction]] = []  # per node of the frontier
    for node in frontier:
        node.joint = joint_indices(g, len(agents), cross)
        mine = []
        for j, idx in enumerate(node.joint):
            actions = {a: node.samples[a][i].text for a, i in zip(agents, idx)}
            where = f"example {node.problem}, turn {turn}, node {node.node_id}, joint {j}"
            mine.append(JointAction(clone(node.env), actions, where))
        work.append(mine)
    flat = [p for mine in work for p in mine]
    steps = iter(pool.map(lambda p: pool.step(p.env, p.actions, p.where), flat))
    return [[Transition(p.env, next(steps)) for p in mine] for mine in work]


def _grow_children(
    frontier: list[Node],
    stepped: list[list[Transition]],
    agents: list[str],
    turn: int,
    last: bool,
    early_termination_threshold: float | None,
) -> list[Node]:
    """Record each node's steps and rewards, and make the successor of every joint action
    whose episode goes on a child node: none on the ``last`` turn, nor under a node that
    stops early (its mean joint reward above the threshold). Returns the next frontier."""
    next_frontier = []
    for node, transitions in zip(frontier, stepped):
        node.steps = [t.step for t in transitions]
        node.rewards = [float(s.reward) for s in node.steps]
        mean_r = sum(node.rewards) / len(node.rewards)
        stop_early = early_termination_threshold is not None and (
            mean_r > early_termination_threshold
        )
        if last or stop_early:
            continue
        for j, (env, step) in enumerate(transitions):
            if step.done:
                continue
            check_observations(step.observations, agents, f"step (example {node.problem})")
            child_id = joint_id(node.node_id, j)
            child = Node(
                node.problem,
                node.slot,
                node_id=child_id,
                turn=turn + 1,
                env=env,
                observations=step.observations,
                example=node.example,
            )
            node.children[j] = child
            next_frontier.append(child)
    return next_frontier


def _credit_trees(
    roots: list[Node],
    agents: list[str],
    discount: float,
    cross: bool,
    credit: Callable[[Step, str], float],
    counterfactual: bool,
) -> list[Sample]:
    """Returns bottom-up on every tree (``_assign_returns``), the counterfactual advantages
    when asked (cross only: the aligned tree has no alternatives with the partners fixed),
    then every sample, each tree's root first, each node's agents in order."""
    samples: list[Sample] = []
    for root in roots:
        _assign_returns(root, agents, discount, cross=cross, credit=credit)
        if counterfactual and cross:
            for node in walk(root):
                counterfactual_advantages(node, agents)
        for node in walk(root):
            tree_positions(node, agents)
        samples.extend(_collect(root, agents))
    return samples


def joint_id(node_id: str, j: int) -> str:
    """The id of joint action ``j`` of node ``node_id``: the id its successor node gets."""
    return f"{j}" if node_id == "root" else f"{node_id}/{j}"


def tree_positions(node: Node, agents: list[str]) -> None:
    """Where each of the node's samples sits in the tree, in ``info`` for samples.jsonl and
    ``teamrl report`` (nothing trains on it): ``node`` and its ``parent`` (None at a root),
    ``index`` (the completion's place among the agent's G), ``joint`` (the ids of the joint
    actions that hold it: one when aligned, G^(N-1) in the cross product), and per such joint
    action its team reward r_j and team return R_j; ``team_reward`` and ``local_reward`` are
    their means over those joint actions (the step's own values when aligned)."""
    parent = None if node.node_id == "root" else (node.node_id.rpartition("/")[0] or "root")
    for k, a in enumerate(agents):
        for i, s in enumerate(node.samples[a]):
            js = [j for j, idx in enumerate(node.joint) if idx[k] == i]
            local = [float(node.steps[j].local_rewards.get(a, 0.0)) for j in js]
            s.info.update(
                node=node.node_id,
                parent=parent,
                index=i,
                joint=[joint_id(node.node_id, j) for j in js],
                joint_team_rewards=[node.rewards[j] for j in js],
                joint_returns=[node.returns[j] for j in js],
                team_reward=sum(node.rewards[j] for j in js) / len(js),
                local_reward=sum(local) / len(local),
            )


def path_summary(root: Node) -> dict:
    """Summary of a single-path episode (one sample per agent per turn): eval reports."""
    node, outcome = root, Outcome()
    while node is not None:
        outcome.turns += 1
        outcome.record(node.steps[0])
        node = node.children.get(0)
    return episode_summary(root.problem, outcome, root.returns[0], team_return=root.returns[0])


def _assign_returns(node: Node, agents: list[str], gamma: float, cross: bool, credit) -> None:
    """Post-order, per agent a: R^a_j = c^a_j + gamma * mean(child_j.agent_returns[a]), with
    c^a_j = credit(step_j, a) (the team reward unless reward_per_agent); node.returns is the
    same recursion on the team reward (what metrics and evaluation report). Then each of a's
    completions gets the mean over the joint actions that contain it."""
    immediate = {a: [credit(step, a) for step in node.steps] for a in agents}
    team, own = list(node.rewards), {a: list(c) for a, c in immediate.items()}
    for j, child in node.children.items():
        _assign_returns(child, agents, gamma, cross, credit)
        team[j] += gamma * sum(child.returns) / len(child.returns)
        for a in agents:
            below = child.agent_returns[a]
            own[a][j] += gamma * sum(below) / len(below)
    node.returns, node.agent_returns = team, own
    for k, a in enumerate(agents):
        for i, s in enumerate(node.samples[a]):
            # the joint actions that contain completion i of agent a
            js = [j for j, idx in enumerate(node.joint) if idx[k] == i]
            s.reward = sum(immediate[a][j] for j in js) / len(js)
            s.return_ = sum(own[a][j] for j in js) / len(js)
            if not cross:
                assert len(js) == 1


def counterfactual_advantages(node: Node, agents: list[str]) -> None:
    """COMA's counterfactual advantage (Foerster et al. 2018) of every completion at a node of
    the cross product: for agent a and joint action j,

        A^a(j) = R^a(j) - (1/G) * sum_i' R^a(j with a's completion replaced by i'),

    the return minus what a's own alternatives would have scored with the partners' choices
    fixed (R^a: the agent's credited return, the team's unless reward_per_agent). Completion i
    of a acts in every joint action that holds it, so its advantage is the mean of A^a(j) over
    those G^(N-1) joint actions, written to ``info["counterfactual_advantage"]``; the spread of
    A^a(j) over them (how much a's credit depends on its partners) to ``info["partner_spread"]``.

    Over the full product that mean equals MAGRPO-cross's marginal return minus the group's
    mean: the baseline term averages every partner combination's mean over a's alternatives,
    which is the mean over all joint actions (docs/algorithms/counterfactual.md)."""
    where = {idx: j for j, idx in enumerate(node.joint)}
    for k, a in enumerate(agents):
        own = node.agent_returns[a]
        g = len(node.samples[a])
        per_completion: list[list[float]] = [[] for _ in range(g)]
        for j, idx in enumerate(node.joint):
            alternatives = [own[where[idx[:k] + (i,) + idx[k + 1 :]]] for i in range(g)]
            per_completion[idx[k]].append(own[j] - sum(alternatives) / g)
        for s, values in zip(node.samples[a], per_completion):
            s.info["counterfactual_advantage"] = float(np.mean(values))
            s.info["partner_spread"] = float(np.std(values))


def _collect(node: Node, agents: list[str]) -> list[Sample]:
    out = [s for a in agents for s in node.samples[a]]
    for child in node.children.values():
        out.extend(_collect(child, agents))
    return out


def rollout_metrics(
    roots: list[Node], samples: list[Sample], agents: list[str]
) -> dict[str, float]:
    """Team reward (episode return at the root), per turn, per agent, components, lengths."""
    m: dict[str, float] = {}
    root_returns = [r for root in roots for r in root.returns]
    m["reward/mean"] = float(np.mean(root_returns))
    m["reward/std"] = float(np.std(root_returns))
    per_turn: dict[int, list[float]] = {}
    comps: dict[str, list[float]] = {}
    local: dict[str, list[float]] = {}
    done = 0
    n_steps = 0
    for root in roots:
        for node in walk(root):
            per_turn.setdefault(node.turn, []).extend(node.rewards)
            for st in node.steps:
                n_steps += 1
                done += int(any(st.terminations.values()))
                add_components(comps, st)
                for a, v in st.local_rewards.items():
                    local.setdefault(a, []).append(float(v))
    m.update(means("reward/turn_", per_turn, "/mean"))
    m.update(means("reward/components/", comps))
    m.update(sample_metrics(samples, agents))
    m.update(means("reward/local/", local, "/mean"))
    # counterfactual baseline: how much each agent's credit depends on its partners' choices
    spread: dict[str, list[float]] = {}
    for s in samples:
        if "partner_spread" in s.info:
            spread.setdefault(s.agent, []).append(s.info["partner_spread"])
    m.update(means("advantage/partner_spread/", spread))
    m["terminated_fraction"] = done / max(1, n_steps)
    return m


# ------------------------------------------------------------------------------- the recipe
DEFAULTS = {"discount": 1.0}  # CoMLRL 1.4.3 is undiscounted


def rollout(team, make_env, examples, cfg, *, step: int, greedy=False, single_path=False):
    a = cfg.algorithm
    k = 1 if single_path else a.num_generations
    return joint_rollout(
        team, make_env, examples, **common_args(cfg, k, greedy), joint_mode=a.joint_mode,
        discount=DEFAULTS["discount"] if a.discount is None else a.discount,
        early_termination_threshold=None if single_path else a.early_termination_threshold,
        alpha=a.alpha, reward_per_agent=a.reward_per_agent,
        counterfactual=a.baseline == "counterfactual",
    )  # fmt: skip


def eval_rollout(team, make_env, examples, cfg, *, n: int, greedy: bool):
    # one joint action per turn is a single path: run each example n times
    repeated = [ex for ex in examples for _ in range(1 if greedy else n)]
    return joint_rollout(team, make_env, repeated, **common_args(cfg, 1, greedy))


MAGRPO = Recipe(
    "magrpo",
    ("problem", "slot", "node", "agent"),
    rollout,
    eval_rollout,
    DEFAULTS,
    joint_tree_shape,
)
