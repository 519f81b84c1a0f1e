"""The team: agents mapped to policies (``policies``), the models they load (``models``), their
optimizers (``optim``) and their saved weights (``weights``)."""

from teamrl.team.policies import Engine, Policy, Team

__all__ = ["Engine", "Policy", "Team"]
