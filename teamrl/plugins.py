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
        if _is_path(spec):
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
    """Before a command reads a run folder: import the ``--import`` given now, then what the
    run imported (``run.json``), so the run folder alone finds its task from any folder.

    What the user gives wins: the record is imported only when the run's task is not
    registered yet (the record's module may have moved; importing both would register the task
    twice). A module the run recorded by name is imported from the folder its file is in (a
    module a Python script imported from its own folder), else by name from the folder the run
    ran in or this one. A task the run got as a Python object is rebuilt by the command line
    only from a builder the user registered: one that no module registers, or a name that is
    teamrl's own task, is one line saying how to make it loadable."""
    from teamrl.envs.base import registered_builders
    from teamrl.run.origin import read_origin

    origin = read_origin(run_dir)
    import_tasks(given)
    if origin is None:
        return
    if origin.task not in registered_builders():  # the record is what registers it
        if origin.cwd and origin.cwd not in sys.path:
            sys.path.append(origin.cwd)  # a module the run imported by name from its folder
        for spec in origin.imports:
            if spec not in (given or []):
                _import_recorded(run_dir, spec, origin.module_files.get(spec))
    if origin.task_source == "python":
        check_python_task(run_dir, origin.task, origin.task_file)


def _import_recorded(run_dir: Path, spec: str, file: str | None) -> None:
    """Import what run.json recorded: a ``.py`` path, or a module by name from the folder of
    its recorded ``file`` (put first on sys.path, as a script's own folder is), else from
    sys.path; one that cannot be found is one line naming the record and the way out."""
    from teamrl.run.origin import ORIGIN_FILE, module_root

    record = f"{Path(run_dir) / ORIGIN_FILE}"
    way_out = "pass --import FILE (the .py file that registers the task, where it is now)"
    if _is_path(spec):
        if not Path(spec).is_file():
            raise ConfigError(
                f"{record}: the run's task was registered by {spec}, which is no longer "
                f"there: {way_out}"
            )
        import_tasks([spec])
        return
    if spec not in sys.modules and file and Path(file).is_file():
        root = str(module_root(spec, file))
        if root not in sys.path:
            sys.path.insert(0, root)  # where the run found it: first, as a script's folder is
    try:
        found = spec in sys.modules or importlib.util.find_spec(spec) is not None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        found = False
    if not found:
        where = f" ({file}, no longer there)" if file else ""
        raise ConfigError(
            f"{record}: the run's task module {spec!r}{where} cannot be found from here: "
            f"{way_out}, or --import MODULE from the folder that holds it"
        )
    import_tasks([spec])


def check_python_task(run_dir: Path, task: str, task_file: str | None) -> None:
    """A run trained on a Task object passed in Python: the command line rebuilds it only
    through a builder the user registered under its name (its module imported just now). A
    name nothing registers, or one that is teamrl's own task (the user's object shadowed it),
    is one line: the registry would build another task than the one trained."""
    from teamrl.envs.base import registered_builders
    from teamrl.tasks.registry import registered_tasks

    registered_tasks()  # teamrl's own tasks in, so a shadowed name is seen as one
    builder = registered_builders().get(task, (None, ""))[0]
    where = f" (defined in {task_file})" if task_file else ""
    load = "or load the run in Python with the task (teamrl.commands.play.load_run(run, task=...))"
    if builder is None:
        raise ConfigError(
            f"{run_dir}: trained on task {task!r}, a Task object passed in Python{where} "
            "that no module registers: register its builder with @register_task in a module "
            f"and pass --import MODULE, {load}"
        )
    if getattr(builder, "__module__", "").startswith("teamrl."):
        raise ConfigError(
            f"{run_dir}: trained on task {task!r}, a Task object passed in Python{where} "
            f"whose name is also teamrl's own task {task!r}: the command line would build "
            "teamrl's task, not the one trained; give yours another name and register its "
            f"builder with @register_task (then --import MODULE), {load}"
        )


def _is_path(spec: str) -> bool:
    """Whether an ``--import`` spec is a file's path rather than a module's name."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


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
