"""The placement plan of a Ray run: which worker groups a config makes and what each worker
reserves. A pure function of the config (no Ray, no model load), so ``teamrl train --dry-run``
prints it and the tests check it.

- ``shared``: one group holds the one model; ``lora``: one group holds the base and every
  adapter (one batched generate across adapters inside each worker); ``separate``: one group
  per agent, so each agent's model lives on its own workers (and GPUs).
- Each group is one Ray placement group of ``num_workers_per_policy`` bundles, one per worker,
  of ``num_cpus_per_worker`` CPUs and ``num_gpus_per_worker`` GPUs. Ray places the bundles;
  ``simulate_nodes`` only shows where the PACK strategy would put them on a given cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from teamrl.config import Config, ConfigError
from teamrl.config.policy_map import base_of, policy_agents, shares_a_base


@dataclass(frozen=True)
class GroupPlan:
    name: str  # the group's name: the policy's ('shared', an agent's) or 'lora'
    policies: tuple[str, ...]  # the policies whose weights the group's workers hold
    agents: tuple[str, ...]  # the agents whose requests the group generates
    model: str  # base weights
    workers: int
    cpus_per_worker: float
    gpus_per_worker: float

    @property
    def bundles(self) -> list[dict[str, float]]:
        """The placement group's bundles: one per worker."""
        one = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker > 0:
            one["GPU"] = self.gpus_per_worker
        return [dict(one) for _ in range(self.workers)]


def placement_plan(cfg: Config) -> list[GroupPlan]:
    """One GroupPlan per worker group, in the team's policy order."""
    d, agents = cfg.distributed, [a.name for a in cfg.team.agents]

    def group(name: str, policies: list[str], members: list[str], model: str) -> GroupPlan:
        return GroupPlan(
            name,
            tuple(policies),
            tuple(members),
            model,
            d.num_workers_per_policy,
            d.num_cpus_per_worker,
            d.num_gpus_per_worker,
        )

    policies = policy_agents(cfg)
    if shares_a_base(cfg):  # one model object: one group holds every policy
        name = "shared" if list(policies) == ["shared"] else "lora"
        return [group(name, list(policies), agents, cfg.model.name_or_path)]
    return [group(a.name, [a.name], [a.name], base_of(cfg, a)) for a in cfg.team.agents]


def sampler_plan(cfg: Config) -> list[GroupPlan]:
    """The asynchronous generator's own groups (``algorithm.max_staleness`` > 0 on Ray): a
    copy of every learner group that only generates (``RayExecution.sampler_team``)."""
    if cfg.algorithm.max_staleness == 0:
        return []
    return [replace(g, name=f"{g.name} (sampler)") for g in placement_plan(cfg)]


def parse_cluster(text: str) -> list[dict[str, float]]:
    """'2x8' (2 nodes of 8 GPUs) or '2x8x64' (and 64 CPUs each; default 8 CPUs per GPU, at
    least 16) -> one resource dict per node."""
    try:
        parts = [int(p) for p in text.lower().split("x")]
        nodes, gpus = parts[0], parts[1]
        cpus = parts[2] if len(parts) > 2 else max(16, 8 * gpus)
        if nodes < 1 or gpus < 0 or cpus < 1 or len(parts) > 3:
            raise ValueError
    except (ValueError, IndexError):
        raise ConfigError(
            f"--cluster: expected NODESxGPUS or NODESxGPUSxCPUS, e.g. 2x8, got {text!r}"
        ) from None
    return [{"CPU": float(cpus), "GPU": float(gpus)} for _ in range(nodes)]


def simulate_nodes(
    groups: list[GroupPlan], nodes: list[dict[str, float]]
) -> list[list[int]] | None:
    """Where PACK would put each worker: for each group, the node index of each worker
    (first fit, a group's workers on as few nodes as possible); None when it does not fit."""
    free = [dict(n) for n in nodes]
    out = []
    for g in groups:
        where = []
        for bundle in g.bundles:
            # the node this group already uses, if it still fits; else the first that fits
            order = sorted(range(len(free)), key=lambda i: (i not in where, i))
            fit = next((i for i in order if _fits(free[i], bundle)), None)
            if fit is None:
                return None
            for k, v in bundle.items():
                free[fit][k] -= v
            where.append(fit)
        out.append(where)
    return out


def _fits(free: dict[str, float], bundle: dict[str, float]) -> bool:
    return all(free.get(k, 0.0) + 1e-9 >= v for k, v in bundle.items())


def format_plan(cfg: Config, nodes: list[dict[str, float]] | None = None) -> str:
    """The plan as text: the controller, each group and its workers (an asynchronous run's
    sampler groups too), the totals, and (given a cluster) the node of every worker."""
    groups = placement_plan(cfg) + sampler_plan(cfg)
    d = cfg.distributed
    lines = [
        f"placement plan: team.policies={cfg.team.policies}, distributed.backend={d.backend}, "
        f"address={d.address}",
        "controller: this process (episodes, envs, rewards, advantages, logs, checkpoints)",
    ]
    where = simulate_nodes(groups, nodes) if nodes else None
    for gi, g in enumerate(groups):
        lines.append(
            f"group {g.name!r}: model {g.model}; policies {list(g.policies)}; agents "
            f"{list(g.agents)}; {g.workers} worker(s) x {_res(g.bundles[0])}"
        )
        for w in range(g.workers):
            node = f" -> node {where[gi][w]}" if where else ""
            lines.append(f"  worker {w}: rank {w} of {g.workers}{node}")
    cpus = sum(b["CPU"] for g in groups for b in g.bundles)
    gpus = sum(b.get("GPU", 0.0) for g in groups for b in g.bundles)
    lines.append(f"total: {len(groups)} group(s), {cpus:g} CPU(s), {gpus:g} GPU(s)")
    if nodes and where is None:
        lines.append(f"does NOT fit the cluster given ({len(nodes)} node(s) of {_res(nodes[0])})")
    return "\n".join(lines)


def _res(r: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in r.items())
