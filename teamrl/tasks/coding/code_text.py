"""Reading code out of a completion: the program, a named top-level function, the imports,
and what a problem's own prompt contributes to the program (its imports and helpers)."""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

from teamrl.text import extract_code_block


def extract_code(text: str) -> str:
    """The program in a completion: the last ```python block, else the last bare ``` block,
    else the whole text (``extract_code_block``'s ``program`` mode)."""
    return extract_code_block(text, "program")


@dataclass
class FunctionCode:
    """A top-level function found in a completion."""

    name: str
    source: str  # dedented, decorators included
    has_return: bool


def _returns(node: ast.AST) -> bool:
    """True if ``node``'s own body has a ``return`` (nested defs and classes do not count)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.Return):
            return True
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(child))
    return False


def find_function(text: str, name: str) -> FunctionCode | None:
    """The last top-level ``def name`` in a completion, or None.

    Parsed with ``ast`` when the code parses; otherwise found line by line (so a completion
    with a syntax error still earns its L1 points and fails at L2, as in the reference).
    """
    code = extract_code_block(text, "all_blocks")
    lines = code.splitlines()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    if tree is not None:
        defs = [
            n
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
        ]
        if not defs:
            return None
        node = defs[-1]
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        source = "\n".join(lines[start - 1 : node.end_lineno])
        return FunctionCode(name, textwrap.dedent(source), _returns(node))
    # Line-based fallback: the def line, then every line indented deeper (or blank).
    header = re.compile(rf"^([ \t]*)(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(")
    starts = [(i, len(m.group(1))) for i, ln in enumerate(lines) if (m := header.match(ln))]
    if not starts:
        return None
    top = [s for s in starts if s[1] == 0] or starts
    first, indent = top[-1]
    end = first + 1
    while end < len(lines):
        ln = lines[end]
        stripped = ln.strip()
        if stripped and len(ln) - len(ln.lstrip()) <= indent and not stripped.startswith(")"):
            break
        end += 1
    block = lines[first:end]
    while block and not block[-1].strip():
        block.pop()
    has_return = any(re.match(r"^[ \t]+return\b", ln) for ln in block[1:])
    return FunctionCode(name, textwrap.dedent("\n".join(block)), has_return)


_IMPORT_LINE = re.compile(r"^(?:import[ \t]+\S|from[ \t]+\S+[ \t]+import[ \t]+\S)")


def find_imports(text: str) -> list[str]:
    """Top-level import statements of a completion (``__future__`` imports are dropped)."""
    code = extract_code_block(text, "all_blocks")
    try:
        tree = ast.parse(code)
    except SyntaxError:
        found = [ln.rstrip() for ln in code.splitlines() if _IMPORT_LINE.match(ln)]
    else:
        found = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return [ln for ln in found if not ln.startswith("from __future__")]


def prompt_context(prompt: str, entry_point: str) -> str:
    """What the problem statement contributes to the program: its imports and any helper
    definitions or constants, i.e. every top-level statement except the entry-point stub."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError as err:
        raise ValueError(f"prompt: does not parse ({err.msg}, line {err.lineno})") from err
    keep = [
        n
        for n in tree.body
        if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point)
        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
    ]
    return "\n\n".join(ast.unparse(n) for n in keep)
