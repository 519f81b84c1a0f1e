"""Every code block of the docs runs (docs/*.md and docs/algorithms/*.md).

Each page runs in its own empty folder, its blocks in page order, so a later block may use
what an earlier one made (a run folder, a file). The convention, an HTML comment on the line(s)
before a block (invisible on GitHub):

- ```python blocks are executed in-process, each in a fresh namespace;
- a ```bash block that starts with ``teamrl`` holds teamrl commands only: each command line is
  run through ``teamrl.cli.main`` and must exit 0; ``teamrl train``/``eval`` get
  ``TEST_OVERRIDES`` appended (a tiny model, one step, no progress bar). Other bash blocks
  (``make``, ``pip``, ``ray start``) and other languages are not run;
- ``<!-- test: skip REASON -->`` does not run the block;
- ``<!-- test: overrides k=v ... -->`` appends more overrides to the block's train/eval lines;
- ``<!-- test: replace OLD => NEW; ... -->`` edits the block's text before it runs;
- ``<!-- test: file NAME -->`` writes the block (any language) to NAME instead of running it.

In every block ``smollm2-135m`` becomes ``tiny-llama`` (the tests never load the real model).
The config reference (docs/config.md) must equal what docs/gen_config_reference.py renders.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + sorted(DOCS.glob("algorithms/*.md"))
# Pages owned elsewhere whose blocks are not run here, and why.
NOT_RUN = {
    "results.md": "its blocks are experiment commands that run for minutes to hours; "
    "tests/test_experiments.py checks that the scripts build a valid config for every condition",
}
TEST_OVERRIDES = ["model.name_or_path=tiny-llama", "train.max_steps=1", "log.progress_bar=false"]
DIRECTIVE = re.compile(r"<!--\s*test:\s*(\w+)\s*(.*?)\s*-->", re.S)


@dataclass
class Block:
    page: str
    line: int
    lang: str
    code: str
    directives: dict[str, str] = field(default_factory=dict)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, each with the test directives just above it."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    pending: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        m = DIRECTIVE.search(line)
        if m:
            pending[m.group(1)] = m.group(2)
        elif line.startswith("```"):
            lang, start, body = line[3:].strip(), i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            out.append(Block(path.name, start, lang, "\n".join(body) + "\n", pending))
            pending = {}
        elif line.strip():
            pending = {}  # a directive applies to the block right after it
        i += 1
    return out


def prepared(block: Block) -> str:
    code = block.code.replace("smollm2-135m", "tiny-llama")
    for pair in filter(None, (p.strip() for p in block.directives.get("replace", "").split(";"))):
        old, new = (s.strip() for s in pair.split("=>"))
        assert old in code, f"{block.page}:{block.line}: replace {old!r}: not in the block"
        code = code.replace(old, new)
    return code


def commands(code: str) -> list[list[str]]:
    """The block's command lines (continuations joined, comments dropped), as argv lists."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [shlex.split(ln, comments=True) for ln in joined.splitlines() if ln.strip()]


def run_cli(argv: list[str], extra: list[str]) -> int:
    from teamrl.cli import main

    if argv[0] in ("train", "eval"):
        argv = argv + TEST_OVERRIDES + extra
    try:
        return main(argv)
    except SystemExit as exit_:  # --help-config exits like --help
        return int(exit_.code or 0)


@pytest.fixture
def clean_registry():
    """Tasks a page registers are forgotten after it (names may repeat across pages)."""
    from teamrl.envs import base
    from teamrl.tasks.registry import registered_tasks

    registered_tasks()  # builtin tasks in first
    before = dict(base._REGISTRY)
    path = list(sys.path)
    yield
    base._REGISTRY.clear()
    base._REGISTRY.update(before)
    sys.path[:] = path


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_every_code_block_of_the_page_runs(page, tmp_path, monkeypatch, capsys, clean_registry):
    if page.name in NOT_RUN:
        pytest.skip(NOT_RUN[page.name])
    monkeypatch.chdir(tmp_path)
    for block in blocks(page):
        where = f"{page.name}:{block.line}"
        if "skip" in block.directives:
            assert block.directives["skip"], f"{where}: a skip needs a reason"
            continue
        code = prepared(block)
        if "file" in block.directives:
            (tmp_path / block.directives["file"]).write_text(code)
        elif block.lang == "python":
            exec(compile(code, where, "exec"), {"__name__": "__docs__"})
        elif block.lang == "bash" and commands(code) and commands(code)[0][0] == "teamrl":
            extra = block.directives.get("overrides", "").split()
            for argv in commands(code):
                assert argv[0] == "teamrl", f"{where}: a teamrl block runs teamrl only: {argv}"
                capsys.readouterr()
                rc = run_cli(argv[1:], extra)
                assert rc == 0, f"{where}: {shlex.join(argv)} -> {rc}\n{capsys.readouterr().err}"


def test_directives_sit_on_a_block_and_name_known_actions():
    known = {"skip", "overrides", "replace", "file"}
    for page in PAGES:
        text = page.read_text()
        for m in DIRECTIVE.finditer(text):
            assert m.group(1) in known, f"{page.name}: unknown test directive {m.group(1)!r}"
        n_directives = len(DIRECTIVE.findall(text))
        n_attached = sum(len(b.directives) for b in blocks(page))
        assert n_directives == n_attached, f"{page.name}: a test directive is not above a block"


def test_config_reference_is_generated_from_the_help_strings():
    sys.path.insert(0, str(DOCS))
    try:
        import gen_config_reference
    finally:
        sys.path.remove(str(DOCS))
    assert (DOCS / "config.md").read_text() == gen_config_reference.render(), (
        "docs/config.md is stale: run python docs/gen_config_reference.py"
    )


def test_every_page_is_linked_from_the_index_and_links_resolve():
    index = (DOCS / "index.md").read_text()
    for page in PAGES:
        if page.name != "index.md":
            assert str(page.relative_to(DOCS)) in index, f"docs/index.md does not link {page.name}"
    for page in [*PAGES, ROOT / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"
