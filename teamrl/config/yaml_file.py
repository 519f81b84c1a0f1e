"""A YAML mapping read with the safe loader and its aliases bounded: what every config file
(a user's config, a run folder's config.yaml) is read with.

An alias is a reference to an anchored node; whatever walks the data (a config dump, the report
page's JSON) expands it, so nine aliases of nine aliases of ... turn a 600-byte file into
gigabytes. The document as its aliases expand it may be at most ``ALIAS_BUDGET`` nodes and
characters larger than as written (a config that shares a few settings by alias, a merge key,
stays far below); a larger or a recursive one is refused. The size is measured on the composed
node graph, before anything is constructed, so a bomb is measured, never expanded.

Each caller words its own errors (``YamlProblem`` carries the reason and where): a config file
names "line L, column C", a run file "path:L".
"""

from __future__ import annotations

import yaml

ALIAS_BUDGET = 100_000  # nodes and characters YAML aliases may add to a document


class YamlProblem(Exception):
    """Why a text is not a YAML mapping teamrl reads: ``reason``, and the 1-based ``line`` and
    ``column`` where YAML says (None where it does not)."""

    def __init__(self, reason: str, line: int | None = None, column: int | None = None):
        super().__init__(reason)
        self.reason, self.line, self.column = reason, line, column


def load_mapping(text: str) -> dict:
    """The mapping ``text`` holds (``{}`` for an empty document); anything else, invalid YAML,
    a character YAML does not allow, and aliases past ``ALIAS_BUDGET`` raise ``YamlProblem``."""
    try:
        data = _load_bounded(text)
    except yaml.reader.ReaderError as err:  # a character YAML does not allow (a NUL, ...)
        line = text.count("\n", 0, err.position) + 1
        raise YamlProblem(
            f"invalid YAML: character {chr(err.character)!r} is not allowed", line
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        reason = getattr(err, "problem", None) or type(err).__name__
        if mark is None:
            raise YamlProblem(f"invalid YAML: {reason}") from None
        raise YamlProblem(f"invalid YAML: {reason}", mark.line + 1, mark.column + 1) from None
    except RecursionError:
        raise YamlProblem("invalid YAML: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise YamlProblem(f"expected a YAML mapping at the top level, got {_kind(data)}")
    return data


def _kind(v: object) -> str:
    return {list: "a list", str: "a string", bool: "true or false"}.get(type(v), type(v).__name__)


def _load_bounded(text: str) -> object:
    """``yaml.safe_load`` in its two halves, the aliases measured between them: compose the
    node graph (aliases are shared nodes, nothing is expanded yet), then construct."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _bound_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _bound_aliases(root: yaml.Node) -> None:
    """Refuse ``root`` when its aliases expand it by more than ``ALIAS_BUDGET``.

    The composer resolves an alias to the very node its anchor names, so the document is a
    graph; its size as written is the sum over distinct nodes, its size expanded the sum over
    every path from the root. Each counts a node as 1 plus its scalar's characters. The
    expanded size is computed once per node (memo); a node reached again while its own size is
    still being computed is a recursive alias.
    """
    expanded: dict[int, int] = {}
    open_nodes: set[int] = set()
    written = 0

    def size(node: yaml.Node) -> int:
        nonlocal written
        key = id(node)
        if key in expanded:
            return expanded[key]
        if key in open_nodes:
            raise YamlProblem(
                "a recursive YAML alias (an endless document)", node.start_mark.line + 1
            )
        open_nodes.add(key)
        if isinstance(node, yaml.ScalarNode):
            total = 1 + len(node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in node.value)
        else:  # a mapping: its keys and values
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        expanded[key] = total
        written += 1 + len(node.value) if isinstance(node, yaml.ScalarNode) else 1
        return total

    total = size(root)
    if total - written > ALIAS_BUDGET:
        raise YamlProblem(
            f"its YAML aliases expand it from {written:,} to {total:,} nodes and characters "
            f"(at most {ALIAS_BUDGET:,} more are read): an alias bomb?"
        )
