"""Plain helpers the tests share: functions, constants and scripted stand-ins, never fixtures
or hooks (those live in tests/conftest.py). Import them by module, ``from helpers.runs import
tiny_overrides``: pytest puts tests/ on sys.path for tests/conftest.py, as it did for
``from conftest import ...``.

- ``runs``: overrides for small configs on tiny models; a training run in a subprocess.
- ``cli``: the CLI run to its one-line error.
- ``coding``: function-task and contest rows in the upstream formats, written as JSONL.
- ``rollout_turns``: a scripted team and a counter env for agent-turn (AT-GRPO) rollouts.
- ``rollout_joint``: a scripted team and reward tables for joint-action (MAGRPO) rollouts.
- ``sampling``: a two-adapter tiny LoRA model and the completion ids of a generate call.
- ``flood``: connections from another user (uid 65534) held against a server; ``flood_run``,
  an app run flooded mid-run (a script).

tests/ray and tests/vllm have their own (``ray_helpers``, ``vllm_helpers``): not named
``helpers``, since pytest puts their folders on sys.path too.
"""
