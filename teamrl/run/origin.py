"""Where a run came from, in its folder (``run.json``), so that the run folder alone is enough to
continue, evaluate, play and export it.

A run records the task it trained (the name, and whether a registered builder or a Task object
passed in Python built it), the ``--import`` modules and files that registered user tasks (a
file as an absolute path, so it imports from any folder), the file of every module recorded by
name (a module a script imported from its own folder is found from any other), and how it was
started: the command line, or the Python entry (the script and its arguments), and the working
folder. The commands that read a run folder (``teamrl train RUN_DIR --resume``, ``eval``,
``play``, ``export``) import what the run imported before they read its config, so nothing is
typed twice.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ORIGIN_FILE = "run.json"


@dataclass
class RunOrigin:
    task: str  # env.name as trained
    task_source: str  # "registry": a registered builder; "python": a Task object passed in
    imports: list[str] = field(default_factory=list)  # what registered the user's tasks
    task_file: str | None = None  # "python": the file that defined the task's env factory
    command: list[str] = field(default_factory=list)  # argv (teamrl ...) or [script, args...]
    cwd: str = ""
    # {module name in imports: its file}: where to import it from when the folder it was found
    # in (a script's own, the run's working folder) is not on sys.path
    module_files: dict[str, str] = field(default_factory=dict)


_COMMAND: list[str] = []  # the command line, when the CLI started this process's run


def set_command(argv: list[str] | None) -> None:
    """Called by the CLI: the run is started by ``teamrl`` with these arguments (None: the CLI
    call has ended, a later run in this process is a Python one)."""
    _COMMAND[:] = [] if argv is None else ["teamrl", *argv]


def origin_of(task_name: str, registered: bool, imports: list[str], task_file: str | None):
    """This process's run origin: the CLI's command line, else the Python entry (the
    interpreter, the script and its arguments), and the working folder."""
    argv = list(_COMMAND) or [Path(sys.executable).name, *sys.argv]
    return RunOrigin(
        task=task_name,
        task_source="registry" if registered else "python",
        imports=list(imports),
        task_file=task_file,
        command=argv,
        cwd=os.getcwd(),
        module_files=module_files(imports),
    )


def module_files(specs: list[str]) -> dict[str, str]:
    """{spec: its module's absolute file} for each spec that names an imported module (a spec
    that is a file's path names its file already)."""
    out = {}
    for spec in specs:
        file = getattr(sys.modules.get(spec), "__file__", None)
        if file:
            out[spec] = str(Path(file).resolve())
    return out


def module_root(name: str, file: str) -> Path:
    """The folder to put on sys.path so that module ``name`` imports from ``file``:
    ``/proj/sum_task.py`` -> ``/proj``; ``/proj/pkg/tasks.py`` (``pkg.tasks``) -> ``/proj``;
    a package's ``__init__.py`` one level higher."""
    path = Path(file)
    levels = name.count(".") + (1 if path.stem == "__init__" else 0)
    return path.parents[min(levels, len(path.parents) - 1)]


def write_origin(run_dir: Path, origin: RunOrigin) -> None:
    """``run.json``, atomically (a crash never leaves half a file)."""
    tmp = run_dir / f".{ORIGIN_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(origin), indent=2) + "\n")
    os.replace(tmp, run_dir / ORIGIN_FILE)


def read_origin(run_dir: Path) -> RunOrigin | None:
    """The run's origin, or None for a run folder written before teamrl recorded it."""
    path = Path(run_dir) / ORIGIN_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return RunOrigin(**{k: v for k, v in data.items() if k in RunOrigin.__dataclass_fields__})
