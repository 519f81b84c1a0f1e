"""The import graph of teamrl: no cycle, and no arrow that runs back up the layers.

Every module under teamrl/ is parsed (not imported). Cycles are checked on the imports that
run at import time (module level, outside ``if TYPE_CHECKING``) and again with the lazy ones
inside functions, which run too; the layering rules on every import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "teamrl"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, here: str) -> list[str]:
    """The modules an import statement loads (``from pkg import mod`` names the submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative import
        pkg = here.split(".")
        if not MODULES[here].name == "__init__.py":
            pkg = pkg[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append(sub if sub in MODULES else base)
    return out


def imports(name: str) -> tuple[set[str], set[str], set[str]]:
    """(import-time imports, imports that run at all, every import) of module ``name``, as
    dotted module names: the second adds the lazy imports inside functions, the third the
    ``if TYPE_CHECKING`` ones (which never run)."""
    tree = ast.parse(MODULES[name].read_text())
    eager: set[str] = set()
    runtime: set[str] = set()
    every: set[str] = set()

    def visit(node: ast.AST, at_import_time: bool, runs: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found = _targets(child, name)
                every.update(found)
                if runs:
                    runtime.update(found)
                if at_import_time:
                    eager.update(found)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False, runs)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                visit(child, False, False)
            else:
                visit(child, at_import_time, runs)

    visit(tree, True, True)
    return eager, runtime, every


GRAPH = {name: imports(name) for name in MODULES}


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_parser_sees_known_imports():
    # a check on the checker: these arrows exist today, so the graph must show them
    eager, _, _ = GRAPH["teamrl.trainer"]
    assert "teamrl.team.policies" in eager and "teamrl.run.checkpoints" in eager
    _, runtime, _ = GRAPH["teamrl.generation.backend"]
    assert "teamrl.generation.hf_backend" in runtime  # lazy, inside make_backend
    assert "teamrl.generation.hf_backend" not in GRAPH["teamrl.generation.backend"][0]


@pytest.mark.parametrize("which", ["import time", "lazy imports too"])
def test_no_import_cycle(which):
    # A lazy import (inside a function) runs too, and hides a cycle only until it runs: a
    # module that imports its importer back is a knot in the layers either way.
    pick = 0 if which == "import time" else 1
    internal = {n: {m for m in deps[pick] if m in MODULES and m != n} for n, deps in GRAPH.items()}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def dfs(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(internal[n]):
            if state.get(m) == 1:
                cycle = stack[stack.index(m) :] + [m]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if m not in state:
                dfs(m)
        stack.pop()
        state[n] = 2

    for n in sorted(internal):
        if n not in state:
            dfs(n)


# The floors of the house, lowest first (docs/design.md draws them). An import may run to its own
# floor or below, never up; within a floor the cycle test above keeps the arrows one-way.
FLOORS = [
    (
        "teamrl.errors",
        "teamrl.sample",
        "teamrl.text",
        "teamrl.tensors",
        "teamrl.truncation",
        "teamrl.distributed",
        "teamrl.sandbox",
    ),
    ("teamrl.config",),
    ("teamrl.generation", "teamrl.envs"),
    ("teamrl.tasks", "teamrl.team"),
    ("teamrl.update", "teamrl.rollout", "teamrl.apps"),
    ("teamrl.credit",),
    ("teamrl.algorithms",),
    ("teamrl.run",),
    ("teamrl.scale",),
    ("teamrl.execution", "teamrl.plugins", "teamrl.evaluation", "teamrl.preflight"),
    ("teamrl.trainer",),
    ("teamrl.commands",),
    ("teamrl.cli",),
]


def floor_of(module: str) -> int:
    for i, prefixes in enumerate(FLOORS):
        if _under(module, prefixes):
            return i
    raise AssertionError(f"{module} stands on no floor: add it to FLOORS (and docs/design.md)")


def test_every_module_stands_on_a_floor():
    for name in MODULES:
        if name != "teamrl":
            floor_of(name)


def test_no_import_runs_up_a_floor():
    # every import counts: at import time, lazy (inside functions) and under TYPE_CHECKING
    bad = [
        f"{n} (floor {floor_of(n)}) imports {m} (floor {floor_of(m)})"
        for n, (_, _, every) in sorted(GRAPH.items())
        if n != "teamrl"
        for m in sorted(every)
        if m in MODULES and m != "teamrl" and floor_of(m) > floor_of(n)
    ]
    assert not bad, "imports that run up the floors:\n" + "\n".join(bad)


def test_the_root_holds_at_most_twelve_modules():
    root = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(root) <= 12, root


# Beside the floors, what some rooms must never import (modules the rule is about, what they
# must never import): third-party libraries, and neighbours on the same floor.
RULES = [
    (
        ("teamrl.generation",),
        ("teamrl.envs", "teamrl.tasks", "teamrl.team"),
    ),
    (
        ("teamrl.envs", "teamrl.tasks"),
        ("torch", "transformers", "peft", "teamrl.generation", "teamrl.team"),
    ),
    # the maths knows no env, no rollout shape and no generation backend (the loss scores
    # under the sampler's truncation through teamrl.truncation, not through a backend)
    (
        ("teamrl.update",),
        ("teamrl.envs", "teamrl.tasks", "teamrl.rollout", "teamrl.generation"),
    ),
    (("teamrl.team",), ("teamrl.tasks",)),
    (("teamrl.rollout",), ("teamrl.update", "teamrl.team")),
    # the endpoint serves calls through the team's seams; it never trains
    (("teamrl.apps",), ("teamrl.update",)),
]


@pytest.mark.parametrize("layer, forbidden", RULES, ids=[r[0][0] for r in RULES])
def test_layering(layer, forbidden):
    bad = [
        f"{n} imports {m}"
        for n, (_, _, every) in sorted(GRAPH.items())
        if _under(n, layer)
        for m in sorted(every)
        if _under(m, forbidden)
    ]
    assert not bad, "imports that run back up the layers:\n" + "\n".join(bad)


def test_the_trainer_composes_credit_without_knowing_its_kind():
    # The credit seam (teamrl.credit.assign): the trainer imports no critic, advantage or
    # filtering name and never asks which estimator it holds.
    imported = GRAPH["teamrl.trainer"][2]
    assert not imported & {
        "teamrl.credit.critics",
        "teamrl.credit.advantages",
        "teamrl.credit.filtering",
        "teamrl.credit.gae",
        "teamrl.credit.critic_credit",
    }, imported
    source = MODULES["teamrl.trainer"].read_text()
    names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)}
    assert not {n for n in names if "critic" in n.lower() or "advantage" in n.lower()}, names
