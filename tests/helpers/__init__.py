"""Plain helpers the tests share: functions, constants and scripted stand-ins, never fixtures
or hooks (those live in tests/conftest.py). Import them by module, ``from helpers.runs import
tiny_overrides``: pytest puts tests/ on sys.path for tests/conftest.py, as it did for
``from conftest import ...``.

- ``runs``: overrides for small configs on tiny models; a training run in a subprocess.

tests/vllm has its own (``vllm_helpers``): not named ``helpers``, since pytest puts its folder
on sys.path too.
"""
