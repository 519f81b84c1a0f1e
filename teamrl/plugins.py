"""User tasks from outside the package: ``--import`` and the ``teamrl.tasks`` entry points.

A task is registered by running its ``@register_task`` decorator, that is, by importing the
module that defines it. Two ways in:

- ``teamrl train CONFIG --import my_tasks`` (a module on ``sys.path`` or the current folder,
  or a ``.py`` file path; repeatable) imports it before the config is resolved;
- an installed package declares its tasks in the ``teamrl.tasks`` entry-point group,
  ``name = "package.module"`` or ``name = "package.module:builder"``. The group is read only
  when the CLI needs tasks, and an entry point is loaded only when its task is asked for (or
  when ``teamrl envs`` lists them), so one broken plugin does not stop every run.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Any

from teamrl.config import ConfigError
from teamrl.errors import user_frame

GROUP = "teamrl.tasks"


# Which ``--import`` spec (a file as its absolute path) registered which tasks, in this
# process: a run records the spec of its task (run.json), so the commands that read the run
# folder import it again.
_REGISTERED_BY: dict[str, list[str]] = {}


def import_tasks(specs: list[str] | None) -> None:
    """Import each ``--import`` spec (module name or .py path) so its tasks register."""
    from teamrl.envs.base import registered_builders

    for spec in specs or []:
        before = set(registered_builders())
        if spec.endswith(".py") or "/" in spec or "\\" in spec:
            _import_file(spec)
            spec = str(Path(spec).expanduser().resolve())
        else:
            _import_module(spec)
        new = [name for name in registered_builders() if name not in before]
        _REGISTERED_BY.setdefault(spec, []).extend(new)


def task_imports(task_name: str) -> list[str]:
    """What a run that trained ``task_name`` must import to find it again: the ``--import``
    spec that registered it, or the module of a user's builder imported another way (a Python
    script's own import); builtin tasks need nothing."""
    from teamrl.envs.base import registered_builders

    specs = [spec for spec, names in _REGISTERED_BY.items() if task_name in names]
    builder = registered_builders().get(task_name, (None, ""))[0]
    module = getattr(builder, "__module__", "") or ""
    if builder is not None and not module.startswith("teamrl."):
        file = getattr(sys.modules.get(module), "__file__", None)
        spec = str(Path(file).resolve()) if module.startswith("teamrl_user_") and file else module
        if spec not in specs and module != "__main__":
            specs.append(spec)
    return specs


def restore_run_imports(run_dir: Path, given: list[str] | None) -> None:
    """Before a command reads a run folder: import what the run imported (``run.json``), from
    the folder it ran in, then the ``--import`` given now; a task the run got as a Python
    object that nothing registers is one line saying how to make it loadable."""
    from teamrl.run.origin import read_origin
    from teamrl.tasks.registry import registered_tasks

    origin = read_origin(run_dir)
    if origin is not None:
        if origin.cwd and origin.cwd not in sys.path:
            sys.path.append(origin.cwd)  # a module the run imported by name from its folder
        import_tasks([s for s in origin.imports if s not in (given or [])])
    import_tasks(given)
    if origin is not None and origin.task_source == "python":
        if origin.task not in registered_tasks():
            where = f" (defined in {origin.task_file})" if origin.task_file else ""
            raise ConfigError(
                f"{run_dir}: trained on task {origin.task!r}, a Task object passed in "
                f"Python{where} that no module registers: register its builder with "
                "@register_task in a module and pass --import MODULE, or load the run in "
                "Python with the task (teamrl.commands.play.load_run(run, task=...))"
            )


def _import_module(name: str) -> None:
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # like `python -m`: the current folder's modules
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and (name == err.name or name.startswith(err.name + ".")):
            raise ConfigError(
                f"--import {name}: no module named {err.name!r} (give a module on sys.path or in "
                "the current folder, or a path to a .py file)"
            ) from None
        raise ConfigError(f"--import {name}: {_where(err)}") from err
    except Exception as err:
        raise ConfigError(f"--import {name}: {_where(err)}") from err


def _import_file(path: str) -> None:
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ConfigError(f"--import {path}: no such file")
    # A stable module name per file, so importing it twice (two flags, or a resume in the same
    # process) runs its decorators once.
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:8]
    name = f"teamrl_user_{file.stem}_{digest}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--import {path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ConfigError(f"--import {path}: {_where(err)}") from err


def _where(err: BaseException) -> str:
    """``SyntaxError at my_tasks.py:3: invalid syntax``, ``KeyError at my_tasks.py:9 in
    build: 'x'``: the error and the user's line."""
    if isinstance(err, SyntaxError):
        return f"SyntaxError at {Path(err.filename or '?').name}:{err.lineno}: {err.msg}"
    return user_frame(err)  # the user's innermost frame, as for an error in a reward


# --- entry points -----------------------------------------------------------------------------


def entry_points() -> list[Any]:
    return list(importlib.metadata.entry_points(group=GROUP))


def load_entry_point_tasks(only: str | None = None, strict: bool = True) -> list[str]:
    """Load the ``teamrl.tasks`` entry points (only the one named ``only`` when given).

    An entry point that names a module registers its tasks by being imported; one that names a
    builder function is registered under the entry point's name (its docstring's first line is
    the description). Returns one line per broken entry point; raises on the first one instead
    when ``strict``.
    """
    from teamrl.envs.base import register_task
    from teamrl.tasks.registry import registered_tasks

    broken = []
    for ep in entry_points():
        if only is not None and ep.name != only:
            continue
        try:
            obj = ep.load()
        except Exception as err:
            dist = getattr(getattr(ep, "dist", None), "name", None)
            line = (
                f"entry point {ep.name} = {ep.value} (group {GROUP}"
                f"{', package ' + dist if dist else ''}) cannot be loaded: {_where(err)}"
            )
            if strict:
                raise ConfigError(line) from err
            broken.append(line)
            continue
        if callable(obj) and ep.name not in registered_tasks():
            doc = (obj.__doc__ or "").strip().splitlines()
            register_task(ep.name, doc[0] if doc else f"from {ep.value}")(obj)
    return broken


def ensure_task(name: str | None) -> None:
    """Make task ``name`` available: load its entry point if it is not registered yet (None:
    no name; ``task_from_config`` says so in one line)."""
    from teamrl.tasks.registry import registered_tasks

    if name is not None and name not in registered_tasks():
        load_entry_point_tasks(only=name, strict=True)
