"""Agents -> policies, from the config alone: the one place that reads ``team.policies`` (the
Team builds from it; placement, the preflight, checkpoints' base records and the config rules
ask it).

- ``shared``: one policy, ``"shared"``, serves every agent (one model; one adapter with
  ``model.use_peft``);
- ``lora``: one LoRA adapter per agent on one frozen base; the policy is named after the agent;
- ``separate``: one model per agent (``team.agents[i].model`` may differ), named after it.
"""

from __future__ import annotations

from typing import Any


def policy_agents(cfg: Any) -> dict[str, list[str]]:
    """{policy: the agents it serves}, in the team's order."""
    agents = [a.name for a in cfg.team.agents]
    if cfg.team.policies == "shared":
        return {"shared": agents}
    return {a: [a] for a in agents}


def uses_lora(cfg: Any) -> bool:
    return cfg.team.policies == "lora" or bool(cfg.model.use_peft)


def shares_a_base(cfg: Any) -> bool:
    """Whether every policy lives on one model object (``shared``, ``lora``)."""
    return cfg.team.policies != "separate"


def base_of(cfg: Any, agent: Any) -> str:
    """The base model an agent's policy loads (its own with ``separate``)."""
    own = agent.model if cfg.team.policies == "separate" else None
    return own or cfg.model.name_or_path


def model_copies(cfg: Any) -> list[str]:
    """The base models the team holds, one entry per model object."""
    if shares_a_base(cfg):
        return [cfg.model.name_or_path]
    return [base_of(cfg, a) for a in cfg.team.agents]


def adapters_per_model(cfg: Any) -> int:
    """LoRA adapters on each model object (0 without LoRA)."""
    if not uses_lora(cfg):
        return 0
    return len(cfg.team.agents) if cfg.team.policies == "lora" else 1
