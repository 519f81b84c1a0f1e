"""``gencode``: an offline, generated set of small function problems for the helper + main team.

The problems come from the families of ``gen_templates``, ``gen_tier2`` and ``gen_tier3``
(lists, strings, arithmetic, dicts; tiers 1..3). A row has the fields of a HumanEval row
(``task_id``, ``prompt``, ``entry_point``, ``test``, ``source``, ``canonical_solution``) plus
``template``, ``tier`` and ``helper_spec``, so ``AuxMainCodingEnv`` and the leveled reward
take it unchanged. The prompt is a HumanEval-style signature + docstring with one example;
the test is ``check(candidate)`` with five asserts on other inputs (hidden). For the
cooperative families the docstring also names the helper ``aux`` the entry point should call
(its signature and what it returns): the helper agent writes it, the main agent calls it.
``canonical_solution`` (the reference ``aux`` and entry point) is never part of a prompt; the
expected values of the asserts are computed by running it here (our own code, not a model's).

Splits are disjoint by *template*, not only by instance: within each tier the families are
ordered by the SHA-256 of their name and dealt out in a cycle of five (three to train, one to
eval, one to test), so a held-out score measures families the team never trained on
(``template_splits`` lists them). Instances are drawn with ``random.Random("{seed}:{name}:{i}")``
(string seeds hash with SHA-512, so a seed gives the same set on every machine and Python
process); duplicates are skipped.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from teamrl.envs.base import Task, register_task
from teamrl.tasks.coding import gen_tier2, gen_tier3  # noqa: F401  (registers their templates)
from teamrl.tasks.coding.gen_templates import TEMPLATES, Spec, Template
from teamrl.tasks.coding.helper_main import AUX_MAIN_ROLES, SOLO_ROLE, AuxMainCodingEnv
from teamrl.tasks.coding.reward import AUX_NAME, LeveledRewardConfig
from teamrl.tasks.rows import limit_rows
from teamrl.tasks.run_program import Runner

SPLITS = ("train", "eval", "test")
TIERS = (1, 2, 3)
_CYCLE = ("train", "train", "train", "eval", "test")


def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + line if line else line for line in text.splitlines())


def _order_key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def template_splits() -> dict[str, list[str]]:
    """``{split: [template names]}``: per tier, the families in SHA-256 order of their name,
    dealt train, train, train, eval, test in turn."""
    out: dict[str, list[str]] = {s: [] for s in SPLITS}
    for tier in TIERS:
        names = sorted((t.name for t in TEMPLATES.values() if t.tier == tier), key=_order_key)
        for i, name in enumerate(names):
            out[_CYCLE[i % len(_CYCLE)]].append(name)
    return {s: sorted(names) for s, names in out.items()}


def _signature(name: str, params: str, returns: str) -> str:
    return f"def {name}({params}) -> {returns}:"


def _run_reference(source: str, entry: str, args: list[tuple]) -> list:
    """The reference's values on ``args`` (our own template code, run in this process)."""
    space: dict = {}
    exec(compile(source, "<gencode reference>", "exec"), space)
    fn = space[entry]
    return [fn(*a) for a in args]


def render(spec: Spec, template: Template, task_id: str) -> dict:
    """The row of one drawn problem."""
    imports = "from typing import Dict, List\n\n\n"
    reference = ""
    helper_spec = ""
    if spec.helper is not None:
        h = spec.helper
        helper_spec = f"{_signature(AUX_NAME, h.params, h.returns)[4:-1]}, which returns {h.doc}"
        reference += f"{_signature(AUX_NAME, h.params, h.returns)}\n{_indent(h.body)}\n\n\n"
    reference += f"{_signature(spec.entry, spec.params, spec.returns)}\n{_indent(spec.body)}\n"
    values = _run_reference(imports + reference, spec.entry, spec.args)
    (example, *hidden), (example_out, *hidden_out) = spec.args, values
    call = f"{spec.entry}({', '.join(repr(a) for a in example)})"
    doc = spec.doc
    if helper_spec:
        doc += f"\nCall the helper {helper_spec}."
    doc += f"\n>>> {call}\n{example_out!r}"
    signature = _signature(spec.entry, spec.params, spec.returns)
    prompt = f'{imports}{signature}\n    """{_indent(doc).lstrip()}\n    """\n'
    asserts = [
        f"    assert candidate({', '.join(repr(a) for a in args)}) == {out!r}"
        for args, out in zip(hidden, hidden_out)
    ]
    test = "def check(candidate):\n" + "\n".join(asserts) + "\n"
    return {
        "task_id": task_id,
        "prompt": prompt,
        "entry_point": spec.entry,
        "test": test,
        "source": "gencode",
        "canonical_solution": reference,
        "template": template.name,
        "tier": template.tier,
        "helper_spec": helper_spec,
    }


def draw(name: str, seed: int, index: int) -> dict:
    """Instance ``index`` of template ``name`` for ``seed``."""
    t = TEMPLATES[name]
    spec = t.draw(random.Random(f"{seed}:{name}:{index}"))
    return render(spec, t, f"gencode/{name}/{seed}-{index}")


def generate(names: Sequence[str], n: int, seed: int) -> list[dict]:
    """``n`` distinct problems from the templates ``names`` (in turn, one instance each)."""
    if not names:
        raise ValueError("gencode: no template in this split and tier")
    rows: list[dict] = []
    seen: set[tuple[str, str]] = set()
    index = [0] * len(names)
    misses = 0
    i = 0
    while len(rows) < n:
        k = i % len(names)
        i += 1
        row = draw(names[k], seed, index[k])
        index[k] += 1
        key = (row["prompt"], row["test"])
        if key in seen:
            misses += 1
            if misses > 50 * n + 100:
                raise ValueError(f"gencode: cannot draw {n} distinct problems from {list(names)}")
            continue
        seen.add(key)
        rows.append(row)
    return rows


def _tiers(tier: int | Sequence[int]) -> list[int]:
    tiers = [tier] if isinstance(tier, int) and not isinstance(tier, bool) else tier
    if (
        isinstance(tiers, (str, bytes))
        or not isinstance(tiers, Sequence)
        or not tiers
        or any(t not in TIERS for t in tiers)
    ):
        raise ValueError(
            f"env.kwargs.tier: expected one of {TIERS} or a list of them, got {tier!r}"
        )
    return sorted(set(tiers))


def gencode_splits(
    tier: int | Sequence[int] = 2,
    n_train: int = 512,
    n_eval: int = 64,
    n_test: int = 128,
    seed: int = 0,
) -> dict[str, list[dict]]:
    """``{"train", "eval", "test"}`` rows of the tiers ``tier``, each split from its own
    templates (``template_splits``) and its own seed stream."""
    tiers = _tiers(tier)
    sizes = {"train": n_train, "eval": n_eval, "test": n_test}
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"env.kwargs.n_{key}: expected an int >= 1, got {value!r}")
    by_split = template_splits()
    out = {}
    for split in SPLITS:
        names = [n for n in by_split[split] if TEMPLATES[n].tier in tiers]
        out[split] = generate(names, sizes[split], seed)
    return out


@register_task(
    "gencode",
    "Generated function problems (offline, seeded; lists, strings, arithmetic, dicts) in "
    "tiers 1-3, splits disjoint by template; helper writes aux (named in the prompt for the "
    "cooperative families), main the entry point; the leveled reward of humaneval. kwargs: "
    "tier (1, 2, 3 or a list), n_train, n_eval, n_test, seed, limit, max_turns, feedback, "
    "reward_shift, reward, feedback_tests, solo (one agent writes both), local_rewards (each "
    "agent's own reward too).",
)
def gencode_task(
    tier: int | list[int] = 2,
    n_train: int = 512,
    n_eval: int = 64,
    n_test: int = 128,
    seed: int = 0,
    limit: int | None = None,
    max_turns: int = 1,
    feedback: str = "level_feedback",
    reward_shift: float = 0.0,
    reward: dict | None = None,
    feedback_tests: int | None = None,
    solo: bool = False,
    local_rewards: bool = False,
    runner: Runner | None = None,
) -> Task:
    """Build ``gencode``; ``runner`` replaces the sandbox (tests). ``solo``: one agent,
    ``coder``, writes aux and the entry point (the one-agent baseline); ``local_rewards``: each
    step also gives each agent its own reward (``helper_main.own_rewards``), which MAGRPO uses
    with ``algorithm.reward_per_agent=true`` (independent learners with ``alpha=0``)."""
    cfg = LeveledRewardConfig(**{"reward_shift": reward_shift, **(reward or {})})
    for key, value in (("solo", solo), ("local_rewards", local_rewards)):
        if not isinstance(value, bool):
            raise ValueError(f"env.kwargs.{key}: expected true or false, got {value!r}")

    def make_env() -> AuxMainCodingEnv:
        return AuxMainCodingEnv(
            max_turns, feedback, cfg, runner, feedback_tests, solo=solo, local_rewards=local_rewards
        )

    make_env()  # validate the arguments before generating
    splits = gencode_splits(tier, n_train, n_eval, n_test, seed)
    return Task(
        name="gencode",
        make_env=make_env,
        train=limit_rows(splits["train"], limit),
        eval=limit_rows(splits["eval"], limit),
        test=limit_rows(splits["test"], limit),
        agents=dict(SOLO_ROLE if solo else AUX_MAIN_ROLES),
        description="gencode: generated function problems; helper writes aux, main the entry "
        "point; leveled reward.",
    )
