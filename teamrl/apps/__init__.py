"""Apps as tasks: an OpenAI-compatible endpoint in front of the team (``endpoint``), the
episodes of a user's program run against it with their calls batched (``episodes``), and the
task that names the program (``task``: ``app_task``). ``teamrl.algorithms.app`` is the recipe
that trains on them; docs/apps.md is the guide."""

from teamrl.apps.task import AppEnv, app_task

__all__ = ["AppEnv", "app_task"]
