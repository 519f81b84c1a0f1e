"""Task families, one folder (or module) each; every module here is imported to register tasks.

A family holds everything one kind of task needs: its data loaders, its env(s) and its
reward. ``teamrl.envs`` holds only the protocol they implement (``Step``, ``Env``, ``Task``,
the registry). Helpers shared across families: ``teamrl.tasks.run_program`` (the sandbox
adapter), ``teamrl.tasks.rows`` and ``teamrl.text`` (code blocks, clipping).

To add a family: create ``teamrl/tasks/<family>/`` with a module that decorates a builder
with ``@register_task``; ``teamrl.envs.base`` finds it by walking this package.
"""
