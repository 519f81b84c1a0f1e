"""Scale-out on Ray: a single controller (the trainer process: episodes, envs, rewards,
advantages, logs, checkpoints) and one worker group of Ray actors per policy, data-parallel
inside the group with ``torch.distributed``. See docs/distributed.md.

Importing this package does not import Ray; ``distributed.backend=ray`` does, when the
trainer builds its team (``ray_team``).
"""

from teamrl.scale.placement import GroupPlan, format_plan, placement_plan


def ray_team(cfg, role_prompts=None):
    from teamrl.scale.group import ray_team as build

    return build(cfg, role_prompts)


def shutdown_team(team) -> None:
    from teamrl.scale.group import shutdown_team as shutdown

    shutdown(team)


__all__ = ["GroupPlan", "format_plan", "placement_plan", "ray_team", "shutdown_team"]
