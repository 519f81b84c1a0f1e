"""Critics for actor-critic teams: ``algorithm.critic`` iac | maac, on MAGRPO's joint tree or
AT-GRPO's agent-turn tree.

A critic here is a linear value head, V(s) = w . h(s) + b, over the last hidden state h of a
policy's model (the policy as it is when the step's rollout was sampled, its adapter active):

- **IAC** (independent actor-critic): one head per agent, on its own policy, reading its own
  prompt: V_a(o_a). At token level the head also reads the hidden state that predicts each
  completion token, so token k's value is V_a(o_a, y_<k).
- **MAAC** (multi-agent actor-critic, centralised critic): one head, on the first agent's
  policy, reading every agent's observation of the state at once (``joint_observation``):
  V(o_1, ..., o_N), the same for every agent of a joint-tree node. On an agent-turn tree
  the state changes as each agent acts, so each (turn, agent) node has its own central value
  (of every agent's observation before that agent acted, and the acting agent's name, whose
  credit it values), credited to the acting agent.

The trunk is not trained by the critic: the heads regress on features taken once per step,
before the policies update, so the value loss never moves a policy and needs no coefficient
against the policy loss (CoMLRL's shared-head mode trains the trunk too; docs/algorithms/iac.md
says why teamrl does not). A head starts at zero, V = 0, so the first step's advantage is the
return itself (REINFORCE), and the critic takes over as it learns.

Per trainer step: ``critic_credit`` (features, values, GAE advantages on the tree,
``teamrl.credit.critic_credit``) before the policy updates, ``fit_critics`` after them.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
import torch

from teamrl.config import Config
from teamrl.credit.critic_credit import (
    chain_critic_advantages,
    critic_advantages,
    scale_critic_advantages,
)
from teamrl.credit.gae import explained_variance, value_loss
from teamrl.rollout.common import RolloutResult
from teamrl.rollout.trees import agent_credit, walk
from teamrl.team.policies import Team

CENTRAL = "central"  # the MAAC critic's name


VAR_FLOOR = 1e-2  # the normalisation's variance never goes below (MAPPO's floor): std >= 0.1


@dataclass
class ValueNorm:
    """Running mean and std of a critic's value targets (``algorithm.critic_value_norm``).

    Per trainer step, with the step's targets G and decay d (debiased as Adam's moments, so the
    first step's estimate is that step's own mean, not (1 - d) of it):

        m <- d m + (1 - d) mean(G),   q <- d q + (1 - d) mean(G^2),   w <- d w + (1 - d)
        mean = m / w,   std = sqrt(max(q / w - mean^2, VAR_FLOOR))

    Before any step (w = 0) it is the identity: mean 0, std 1."""

    decay: float
    m: float = 0.0
    q: float = 0.0
    w: float = 0.0

    def update(self, targets: torch.Tensor) -> None:
        g = targets.double()
        d = self.decay
        self.m = d * self.m + (1 - d) * float(g.mean())
        self.q = d * self.q + (1 - d) * float((g * g).mean())
        self.w = d * self.w + (1 - d)

    @property
    def mean(self) -> float:
        return self.m / self.w if self.w > 0 else 0.0

    @property
    def std(self) -> float:
        if self.w == 0:
            return 1.0
        return max(self.q / self.w - self.mean**2, VAR_FLOOR) ** 0.5

    def state(self) -> dict:
        return {"decay": self.decay, "m": self.m, "q": self.q, "w": self.w}


@dataclass
class Critic:
    name: str  # the agent it values (IAC), or CENTRAL (MAAC)
    policy: str  # the policy whose last hidden state it reads
    head: torch.nn.Linear
    optimizer: torch.optim.Optimizer
    norm: ValueNorm | None = None  # with algorithm.critic_value_norm

    def outputs(self, features: torch.Tensor) -> torch.Tensor:
        """The head's raw outputs (normalised units under value normalisation), (N,)."""
        return self.head(features).squeeze(-1)

    def values(self, outputs: torch.Tensor) -> torch.Tensor:
        """Values from raw outputs: mean + std * output, or the outputs themselves."""
        if self.norm is None:
            return outputs
        return self.norm.mean + self.norm.std * outputs


@dataclass
class CriticBatch:
    """One step's regression data per critic: features, value targets, the values the
    advantages used (the value loss clips around them)."""

    features: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (N, H)
    targets: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (N,)
    old_values: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (N,)
    # the head's raw outputs behind old_values (normalised units under value normalisation):
    # what the clipped value loss holds the new outputs near
    old_outputs: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (N,)


def critic_name(cfg: Config, agent: str) -> str:
    return agent if cfg.algorithm.critic == "iac" else CENTRAL


def build_critics(team: Team, cfg: Config) -> dict[str, Critic]:
    """The run's critics ({} when ``algorithm.critic`` is 'none'), heads at zero."""
    a = cfg.algorithm
    if a.critic == "none":
        return {}
    agents = list(team.agents)
    names = agents if a.critic == "iac" else [CENTRAL]
    critics = {}
    for name in names:
        pol = team.policies[team.policy_of[name if a.critic == "iac" else agents[0]]]
        # a Ray policy's model lives on its workers, which reported its width
        hidden = int(
            pol.model.config.hidden_size if pol.model is not None else pol.engine.hidden_size
        )
        head = torch.nn.Linear(hidden, 1, device=team.device, dtype=torch.float32)
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
        opt = torch.optim.AdamW(head.parameters(), lr=a.critic_learning_rate, weight_decay=0.0)
        norm = ValueNorm(a.critic_value_norm_decay) if a.critic_value_norm else None
        critics[name] = Critic(name, pol.name, head, opt, norm)
    return critics


def joint_observation(
    observations: dict[str, str], agents: list[str], acting: str | None = None
) -> str:
    """What the central critic reads: every agent's observation, tagged with its name, in the
    team's order. A turn-taking env may show only some agents their state at a node (the one
    about to act): the others are left out rather than invented.

    ``acting`` (AT-GRPO's agent-turn nodes) closes the text with the agent whose credit the
    value is for. Each node's credit is that agent's own (alpha * team + its local reward), so
    two agents' nodes of one turn can have returns of different scale (Plan-Path: a failed
    plan about -12, a correct tool call about +10). Without the tag both nodes end with the same
    observation, the head reads nearly the same last hidden state, and fits the mean of the two:
    a baseline off by the same amount, with opposite signs, for both agents (docs/results.md,
    the Plan-Path credit table)."""
    text = "\n\n".join(f"[{a}]\n{observations[a]}" for a in agents if a in observations)
    return text if acting is None else f"{text}\n\n[value for: {acting}]"


@dataclass(frozen=True)
class Job:
    """What a critic reads for one regression key: token ids and the positions whose last
    hidden state it values (one position for a state, one per token at token level)."""

    ids: list[int]
    positions: list[int]


@dataclass
class Read:
    """What the critics read for one regression key (a state, or one token of a sample)."""

    critic: str
    feature: torch.Tensor  # the policy's last hidden state there
    output: float  # the head's raw output (normalised units under value normalisation)
    value: float  # V, in return units


class CreditKeys:
    """The regression keys of a step's states: one per (critic, state). On an agent-turn tree a
    (turn, agent) node is one state, its agent's (IAC) or the team's before that agent acted
    (MAAC); on a joint tree a node is one state per agent (IAC) or one for the team (MAAC)."""

    def __init__(self, cfg: Config, on_chains: bool):
        self.cfg, self.on_chains = cfg, on_chains

    def state(self, agent: str, node) -> Hashable:
        if self.on_chains:
            return ("state", critic_name(self.cfg, node.agent), node.slot, node.turn, node.agent)
        return ("state", critic_name(self.cfg, agent), node.slot, node.node_id)


def critic_credit(
    team: Team, critics: dict[str, Critic], result: RolloutResult, cfg: Config, gamma: float
) -> tuple[CriticBatch, dict[str, float]]:
    """Every sample's advantage from the critics (written in place) and the regression data,
    on the step's joint trees (MAGRPO, ``result.roots``) or agent-turn trees (AT-GRPO,
    ``result.turn_nodes``), GAE discounting by ``gamma`` (``critic_gamma``), in four phases:

        jobs    = what each critic reads: every state (and at token level every token)
        reads   = features, outputs and values: one batched no-grad pass per critic
        targets = GAE on the trees (advantages written into the samples), then the scaling
        batch   = the regression rows: one per (state or token, target)
    """
    agents = list(team.agents)
    on_chains = bool(result.turn_nodes)  # AT-GRPO's rollout; MAGRPO's fills result.roots
    keys = CreditKeys(cfg, on_chains)
    jobs = _critic_jobs(team, critics, result, cfg, keys)
    reads = _read(team, critics, jobs)
    samples = [s for _, _, mine in _states(result, agents, on_chains) for s in mine]
    targets = _gae_targets(result, agents, cfg, gamma, keys, reads)
    scale_critic_advantages(samples, cfg.algorithm.scale_rewards)
    batch = _regression_batch(critics, targets, reads, team.device)
    metrics = {}
    for ag in agents:
        adv = [s.advantage for s in samples if s.agent == ag]
        metrics[f"advantage/spread/{ag}"] = float(np.std(adv)) if adv else 0.0
    return batch, metrics


def _critic_jobs(
    team: Team, critics: dict[str, Critic], result: RolloutResult, cfg: Config, keys: CreditKeys
) -> dict[str, dict[Hashable, Job]]:
    """Per critic, {regression key: what it reads}; a state shared by several agents (MAAC on
    a joint tree) is read once."""
    agents = list(team.agents)
    token = cfg.algorithm.critic_level == "token"
    jobs: dict[str, dict[Hashable, Job]] = {n: {} for n in critics}
    for ag, node, samples in _states(result, agents, keys.on_chains):
        name = critic_name(cfg, ag)
        key = keys.state(ag, node)
        if key in jobs[name]:
            continue  # MAAC on a joint tree: one state for every agent
        if name == CENTRAL:
            tok = team.policies[critics[name].policy].engine.tokenizer
            # on a chain, the node's value is its acting agent's credit: name the agent
            acting = node.agent if keys.on_chains else None
            text = joint_observation(node.observations, agents, acting)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = list(samples[0].prompt_ids)  # a node's samples share it
        jobs[name][key] = Job(ids, [len(ids) - 1])
        if token:
            for s in samples:
                seq = list(s.prompt_ids) + list(s.completion_ids[:-1])
                first = len(s.prompt_ids) - 1
                positions = list(range(first, first + len(s.completion_ids)))
                jobs[name][("tokens", id(s))] = Job(seq, positions)
    return jobs


def _read(
    team: Team, critics: dict[str, Critic], jobs: dict[str, dict[Hashable, Job]]
) -> dict[Hashable, Read]:
    """Features, outputs and values of every job, one batched no-grad pass per critic; a
    token job becomes one read per token: ("token", id(sample), t)."""
    reads: dict[Hashable, Read] = {}
    for name, c in critics.items():
        keys = list(jobs[name])
        pol = team.policies[c.policy]
        todo = [(jobs[name][k].ids, jobs[name][k].positions) for k in keys]
        feats = pol.hidden_at(todo, team.device)  # a Ray policy: rank 0 of its worker group
        with torch.no_grad():
            for k, f in zip(keys, feats):
                out = c.outputs(f)
                o, v = out.tolist(), c.values(out).tolist()
                if k[0] == "tokens":
                    for t in range(len(f)):
                        reads[("token", k[1], t)] = Read(name, f[t], o[t], v[t])
                else:
                    reads[k] = Read(name, f[0], o[0], v[0])
    return reads


def _gae_targets(
    result: RolloutResult,
    agents: list[str],
    cfg: Config,
    gamma: float,
    keys: CreditKeys,
    reads: dict[Hashable, Read],
) -> dict[Hashable, list[float]]:
    """GAE on the step's trees (``teamrl.credit.critic_credit``): every sample's advantage,
    written in place, and each regression key's value targets."""
    a = cfg.algorithm

    def token_values(s):
        return [reads[("token", id(s), t)].value for t in range(len(s.completion_ids))]

    if keys.on_chains:
        return chain_critic_advantages(
            result.turn_nodes,
            state_value=lambda node: reads[keys.state(node.agent, node)].value,
            state_key=lambda node: keys.state(node.agent, node),
            gamma=gamma,
            lam=a.lam,
            level=a.critic_level,
            token_values=token_values,
        )
    return critic_advantages(
        result.roots,
        agents,
        state_value=lambda ag, node: reads[keys.state(ag, node)].value,
        state_key=keys.state,
        credit=agent_credit(a.reward_per_agent, a.alpha),
        gamma=gamma,
        lam=a.lam,
        level=a.critic_level,
        token_values=token_values,
    )


def _regression_batch(
    critics: dict[str, Critic],
    targets: dict[Hashable, list[float]],
    reads: dict[Hashable, Read],
    device: torch.device,
) -> CriticBatch:
    """One regression row per (state or token, target), grouped by critic."""
    rows: dict[str, tuple[list, list, list, list]] = {n: ([], [], [], []) for n in critics}
    for key, tgts in targets.items():
        r = reads[key]
        f, g, v, o = rows[r.critic]
        for target in tgts:
            f.append(r.feature)
            g.append(target)
            v.append(r.value)
            o.append(r.output)
    batch = CriticBatch()
    for name, (f, g, v, o) in rows.items():
        if f:
            batch.features[name] = torch.stack(f)
            batch.targets[name] = torch.tensor(g, dtype=torch.float32, device=device)
            batch.old_values[name] = torch.tensor(v, dtype=torch.float32, device=device)
            batch.old_outputs[name] = torch.tensor(o, dtype=torch.float32, device=device)
    return batch


def critic_gamma(cfg: Config, default_discount: float | None) -> float:
    """The discount of the critics' GAE: ``algorithm.discount``, else the algorithm's default
    (``default_discount``, its recipe's: MAGRPO's 1.0, undiscounted); a discount of None,
    AT-GRPO's default (a candidate judged by its own reward), is gamma = 0. The default comes
    from the caller, which holds the recipe: credit stands below the algorithms."""
    a = cfg.algorithm
    discount = a.discount if a.discount is not None else default_discount
    return 0.0 if discount is None else float(discount)


def _states(result: RolloutResult, agents: list[str], on_chains: bool):
    """(agent, node, that agent's samples at the node) for every state of the step's trees."""
    if on_chains:
        for nodes in result.turn_nodes:
            for node in nodes:
                yield node.agent, node, node.samples
        return
    for root in result.roots:
        for node in walk(root):
            for ag in agents:
                yield ag, node, node.samples[ag]


def fit_critics(
    critics: dict[str, Critic], batch: CriticBatch, cfg: Config, step: int
) -> dict[str, float]:
    """``num_iterations`` passes of ``train.num_mini_batches`` AdamW steps of each head on its
    rows (seeded shuffle); logs the value loss, the explained variance of the values the
    advantages used, and the mean value and target."""
    a, t = cfg.algorithm, cfg.train
    metrics: dict[str, float] = {}
    for name, c in critics.items():
        if name not in batch.features:
            continue
        feats, tgt, old = batch.features[name], batch.targets[name], batch.old_values[name]
        ev = explained_variance(old.tolist(), tgt.tolist())
        if np.isfinite(ev):  # undefined when every target is the same
            metrics[f"critic/explained_variance/{name}"] = ev
        metrics[f"critic/value/{name}"] = float(old.mean())
        metrics[f"critic/target/{name}"] = float(tgt.mean())
        old = batch.old_outputs[name]  # the loss runs in the head's own units
        if c.norm is not None:  # MAPPO's order: the statistics take this step's targets first
            c.norm.update(tgt)
            tgt = (tgt - c.norm.mean) / c.norm.std
            metrics[f"critic/norm_mean/{name}"] = c.norm.mean
            metrics[f"critic/norm_std/{name}"] = c.norm.std
        losses = []
        c.head.train()
        for it in range(a.num_iterations):
            order = list(range(len(tgt)))
            random.Random(cfg.seed + 7919 * step + 104729 * (it + 1)).shuffle(order)
            for mb in (order[i :: t.num_mini_batches] for i in range(t.num_mini_batches)):
                if not mb:
                    continue
                idx = torch.tensor(mb, device=feats.device)
                v = c.outputs(feats[idx])
                loss = value_loss(v, old[idx], tgt[idx], torch.ones_like(v), clip=a.cliprange_value)
                c.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                c.optimizer.step()
                losses.append(float(loss.detach()))
        metrics[f"critic/value_loss/{name}"] = float(np.mean(losses))
    return metrics


def critic_state(critics: dict[str, Critic]) -> dict:
    """What a checkpoint keeps of the critics: heads and optimizer states."""
    out = {}
    for name, c in critics.items():
        out[name] = {
            "policy": c.policy,
            "head": c.head.state_dict(),
            "optimizer": c.optimizer.state_dict(),
        }
        if c.norm is not None:
            out[name]["value_norm"] = c.norm.state()
    return out


def exported_head(state: dict) -> dict[str, torch.Tensor]:
    """A critic's head as export writes it: a plain V = weight . h + bias, with the value
    normalisation folded in (weight * std, bias * std + mean)."""
    head = {k: v.detach().cpu().contiguous() for k, v in state["head"].items()}
    vn = state.get("value_norm")
    if vn:
        norm = ValueNorm(**vn)
        head = {"weight": head["weight"] * norm.std, "bias": head["bias"] * norm.std + norm.mean}
    return head


def load_critic_state(critics: dict[str, Critic], state: dict, where: str) -> None:
    if sorted(state) != sorted(critics):
        raise ValueError(
            f"{where}: holds critics {sorted(state)}, this run has {sorted(critics)} "
            "(algorithm.critic must match the checkpoint's)"
        )
    for name, c in critics.items():
        saved = state[name].get("value_norm")
        if (saved is None) != (c.norm is None):
            raise ValueError(
                f"{where}: critic {name!r} was saved {'without' if saved is None else 'with'} "
                "value normalisation (algorithm.critic_value_norm must match the checkpoint's)"
            )
        c.head.load_state_dict(state[name]["head"])
        c.optimizer.load_state_dict(state[name]["optimizer"])
        if saved is not None:
            c.norm = ValueNorm(**saved)
