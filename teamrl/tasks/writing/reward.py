"""Gated 4-level reward for two-agent collaborative writing (TLDR and arXiv), max 3.0.

The levels are scored in order; a level that fails stops the scoring, so the later levels
are worth 0 (``levels_passed`` says how far a joint action got):

    L1 structure     +0.5 if both completions have ``min_tokens..max_tokens`` whitespace tokens
    L2 length ratio  r = chars(c2) / chars(c1), a trapezoid worth 0..1; r outside the
                     trapezoid's base stops the scoring
    L3 unique words  u = uniq(c2) / uniq(c1), a trapezoid worth 0..0.5; same stop rule
                     (uniq counts distinct lower-cased ``\\w+`` words, stopwords included)
    L4 style         0.4 * T + 0.6 * J, where
                       T = 0 with no transition category, else min(1, 0.4 + 0.05 * (k - 1))
                           for k of the 12 categories found (by substring match by default)
                       J = min(jaccard, cap) / cap over the stopword-filtered word sets

These are the formulas of the MAGRPO writing tasks (LLM_Collab_Writing), so numbers stay
comparable with the paper; the word lists are our own. Two knobs are ours:
``transition_match="word"`` (whole-word matching, harder to game than substrings, which
count "so" inside "also") and the explicit ``levels_passed`` diagnostic.

Notes: with 12 categories T tops out at 0.4 + 0.05 * 11 = 0.95, so the true maximum of the
total is 2.98, not the nominal 3.0. For arXiv (transitions in c1 and c2) we join the two
texts with a newline, so no phrase is found across the seam.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from teamrl.tasks.options import option

# --------------------------------------------------------------------------------------
# Word lists (our own)
# --------------------------------------------------------------------------------------

# 12 categories of discourse connectives. Matching is on the lower-cased text.
# One category a line ("name: phrase, phrase, ..."; an indented line goes on the one above).
_TRANSITIONS = """
addition: additionally, furthermore, moreover, in addition, besides, also, as well, on top of
    that, not only, what's more, along with, plus
example: for example, for instance, such as, to illustrate, namely, in particular, including,
    especially, e.g., as an example, specifically, to show this
clarification: in other words, that is, i.e., to clarify, put differently, simply put, to be
    clear, meaning that, which means, to put it another way, in fact, actually
cause_effect: because, therefore, thus, consequently, as a result, hence, so that, due to,
    since, which led to, for this reason, as a consequence, so
contrast: however, but, on the other hand, in contrast, yet, instead, whereas, conversely, by
    contrast, unlike, rather than, on the contrary
sequence: first, second, third, next, then, afterwards, after that, finally, lastly, to begin
    with, subsequently, followed by
emphasis: indeed, certainly, clearly, above all, notably, most importantly, especially
    important, undoubtedly, of course, obviously, significantly, crucially
summary: in summary, to summarize, to summarise, in short, overall, in conclusion, to sum up,
    all in all, in brief, ultimately, in the end, on the whole
comparison: similarly, likewise, in the same way, just as, compared to, compared with, equally,
    in comparison, much like, as with, by the same token, correspondingly
concession: although, though, even though, despite, in spite of, nevertheless, nonetheless,
    admittedly, even so, still, granted, regardless
condition: if, unless, provided that, as long as, in case, assuming, otherwise, only if, even
    if, whether or not, given that, in the event
time: when, while, meanwhile, during, before, after, until, eventually, currently, recently, at
    the same time, later
"""


def _phrase_table(text: str) -> dict[str, tuple[str, ...]]:
    entries: list[str] = []
    for line in text.strip().splitlines():
        if line.startswith(" "):
            entries[-1] += " " + line.strip()
        else:
            entries.append(line)
    pairs = (entry.split(":", 1) for entry in entries)
    return {name: tuple(p.strip() for p in phrases.split(",")) for name, phrases in pairs}


TRANSITION_WORDS: dict[str, tuple[str, ...]] = _phrase_table(_TRANSITIONS)

# Function words left out of the Jaccard word sets (not out of L3: the reference reward
# counts stopwords there too, and we keep its numbers).
STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves also may might must shall us let lets get got im ive dont s t
    """.split()
)

_WORD = re.compile(r"\w+")


# --------------------------------------------------------------------------------------
# Thresholds: one config, a preset per task
# --------------------------------------------------------------------------------------

# A "band" is a trapezoid (zero_lo, full_lo, full_hi, zero_hi): worth ``peak`` on
# [full_lo, full_hi], linear from 0 at zero_lo up to peak at full_lo, linear from peak at
# full_hi down to 0 at zero_hi; a ratio outside [zero_lo, zero_hi] fails the level (a ratio
# exactly on a base edge scores 0 but does not stop the scoring, as in the paper's code).


@dataclass(frozen=True)
class WritingRewardConfig:
    """Thresholds of the writing reward. The defaults are the TLDR preset; build a task's
    thresholds with ``WritingRewardConfig.tldr()`` or ``WritingRewardConfig.arxiv(variant)``."""

    min_tokens: int = option(8, "L1: fewest whitespace tokens per completion.")
    max_tokens: int = option(256, "L1: most whitespace tokens per completion.")
    structure_reward: float = option(0.5, "L1: reward when both lengths are in range.")
    length_band: tuple[float, float, float, float] = option(
        (1.1, 1.6, 3.2, 5.0), "L2: (zero_lo, full_lo, full_hi, zero_hi) of chars(c2)/chars(c1)."
    )
    length_reward: float = option(1.0, "L2: reward on the flat top.")
    unique_band: tuple[float, float, float, float] = option(
        (1.3, 2.0, math.inf, math.inf),
        "L3: (zero_lo, full_lo, full_hi, zero_hi) of uniq(c2)/uniq(c1).",
    )
    unique_reward: float = option(0.5, "L3: reward on the flat top.")
    transition_text: str = option(
        "c2", "L4: where transition words are looked for: 'c2' or 'both' (c1 and c2)."
    )
    transition_match: str = option(
        "substring", "L4: 'substring' (as the paper; 'so' matches 'also') or 'word' (whole words)."
    )
    transition_base: float = option(0.4, "L4: transition score for one category.")
    transition_step: float = option(0.05, "L4: added per further category (capped at 1).")
    transition_weight: float = option(0.4, "L4: weight of the transition score.")
    jaccard_cap: float = option(
        0.03, "L4: Jaccard similarity at which the overlap score saturates at 1."
    )
    jaccard_weight: float = option(0.6, "L4: weight of the overlap score.")

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def tldr(cls, **overrides: Any) -> WritingRewardConfig:
        """TLDR's thresholds (c1 = concise summary, c2 = detailed summary), with overrides."""
        return cls(**{**TLDR_PRESET, **overrides})

    @classmethod
    def arxiv(cls, variant: str = "paper", **overrides: Any) -> WritingRewardConfig:
        """arXiv's thresholds (c1 = background/motivation, c2 = methods/implications).

        ``variant`` picks the length band: ``"paper"`` (the paper-era code, init commit) or
        ``"current"`` (the reference repo's HEAD)."""
        if variant not in ARXIV_LENGTH_BANDS:
            known = ", ".join(sorted(ARXIV_LENGTH_BANDS))
            raise ValueError(f"arxiv reward variant: expected one of {known}, got {variant!r}")
        return cls(**{**ARXIV_PRESET, "length_band": ARXIV_LENGTH_BANDS[variant], **overrides})


# The fields where the tasks differ; every other field keeps its default in both.
TLDR_PRESET: dict[str, Any] = {
    "min_tokens": 8,
    "length_band": (1.1, 1.6, 3.2, 5.0),
    "unique_band": (1.3, 2.0, math.inf, math.inf),
    "transition_text": "c2",
    "jaccard_cap": 0.03,
}
ARXIV_PRESET: dict[str, Any] = {
    "min_tokens": 128,
    "length_band": (0.8, 1.0, 1.3, 1.5),
    "unique_band": (0.5, 0.7, 1.3, 1.7),
    "transition_text": "both",
    "jaccard_cap": 0.23,
}

# L2 bands of the two arXiv variants; the other levels did not change between them.
ARXIV_LENGTH_BANDS: dict[str, tuple[float, float, float, float]] = {
    "paper": (0.8, 1.0, 1.3, 1.5),
    "current": (0.8, 1.3, 1.6, 2.0),
}


def _validate(cfg: WritingRewardConfig) -> None:
    name = type(cfg).__name__
    if not 0 <= cfg.min_tokens <= cfg.max_tokens:
        raise ValueError(
            f"{name}.min_tokens/max_tokens: expected 0 <= min <= max, "
            f"got {cfg.min_tokens}, {cfg.max_tokens}"
        )
    for key in ("length_band", "unique_band"):
        band = getattr(cfg, key)
        if len(band) != 4 or list(band) != sorted(band):
            raise ValueError(f"{name}.{key}: expected 4 non-decreasing numbers, got {band}")
    if cfg.transition_text not in ("c2", "both"):
        raise ValueError(
            f"{name}.transition_text: expected 'c2' or 'both', got {cfg.transition_text!r}"
        )
    if cfg.transition_match not in ("substring", "word"):
        raise ValueError(
            f"{name}.transition_match: expected 'substring' or 'word', got {cfg.transition_match!r}"
        )
    if cfg.jaccard_cap <= 0:
        raise ValueError(f"{name}.jaccard_cap: expected > 0, got {cfg.jaccard_cap}")


# --------------------------------------------------------------------------------------
# Text measures
# --------------------------------------------------------------------------------------


def count_tokens(text: str) -> int:
    """Whitespace-token count (what L1 measures)."""
    return len(text.split())


def words(text: str) -> list[str]:
    """Lower-cased ``\\w+`` words."""
    return _WORD.findall(text.lower())


def unique_word_count(text: str) -> int:
    """Distinct words, stopwords included (what L3 measures)."""
    return len(set(words(text)))


def content_words(text: str) -> set[str]:
    """Distinct words without stopwords (what the Jaccard term compares)."""
    return {w for w in words(text) if w not in STOPWORDS}


def jaccard(text_1: str, text_2: str) -> float:
    """|A ∩ B| / |A ∪ B| of the content-word sets; 1.0 when both are empty (as the paper)."""
    a, b = content_words(text_1), content_words(text_2)
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def transition_categories(text: str, match: str = "substring") -> set[str]:
    """Categories of ``TRANSITION_WORDS`` with at least one phrase in ``text``."""
    if match == "word":
        # Whole words only: text and phrases become space-padded word sequences, so
        # "however." matches "however" and "e.g." matches as "e g", but "also" never
        # matches "so".
        padded = " " + " ".join(words(text)) + " "
        return {
            cat
            for cat, phrases in TRANSITION_WORDS.items()
            if any(f" {' '.join(words(p))} " in padded for p in phrases)
        }
    low = text.lower()
    return {cat for cat, phrases in TRANSITION_WORDS.items() if any(p in low for p in phrases)}


def band_score(x: float, band: tuple[float, float, float, float], peak: float) -> float | None:
    """Trapezoid value of ``x``: ``peak`` on the top, linear ramps, ``None`` off the base."""
    zero_lo, full_lo, full_hi, zero_hi = band
    if x < zero_lo or x > zero_hi:
        return None
    if x < full_lo:
        return peak * (x - zero_lo) / (full_lo - zero_lo)
    if x > full_hi:
        return peak * (zero_hi - x) / (zero_hi - full_hi)
    return peak


# --------------------------------------------------------------------------------------
# The reward
# --------------------------------------------------------------------------------------


@dataclass
class WritingScore:
    """One joint action's reward, with each level's share (they sum to ``total``).

    ``levels_passed`` is how many levels were scored without stopping (0..4). ``metrics``
    holds the raw measures (token counts, ratios, Jaccard, transition categories) for logs;
    a measure of a level that was never reached is absent.
    """

    total: float
    structure: float = 0.0
    length_ratio: float = 0.0
    unique_words: float = 0.0
    style: float = 0.0
    levels_passed: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    def components(self) -> dict[str, float]:
        """The four level values, keyed as they are logged (``reward/<name>``)."""
        names = ("structure", "length_ratio", "unique_words", "style")
        return {name: getattr(self, name) for name in names}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_pair(c1: str, c2: str, cfg: WritingRewardConfig) -> WritingScore:
    """Score one joint action (``c1`` from agent 1, ``c2`` from agent 2) under ``cfg``."""
    if not isinstance(c1, str) or not isinstance(c2, str):
        raise TypeError(f"completions must be str, got {type(c1).__name__}, {type(c2).__name__}")
    n1, n2 = count_tokens(c1), count_tokens(c2)
    u1, u2 = unique_word_count(c1), unique_word_count(c2)
    metrics: dict[str, float] = {"tokens_1": n1, "tokens_2": n2, "unique_1": u1, "unique_2": u2}
    out = WritingScore(total=0.0, metrics=metrics)

    # L1 structure: both completions within the token range.
    if not (cfg.min_tokens <= n1 <= cfg.max_tokens and cfg.min_tokens <= n2 <= cfg.max_tokens):
        return out
    out.structure = cfg.structure_reward
    out.levels_passed = 1

    # L2 length ratio in characters, then L3 unique-word ratio: each a band score of c2/c1
    # (an empty c1, only possible with min_tokens == 0, or a failed band stops the scoring).
    levels = (
        ("length_ratio", "char_ratio", len(c1), len(c2), cfg.length_band, cfg.length_reward),
        ("unique_words", "unique_ratio", u1, u2, cfg.unique_band, cfg.unique_reward),
    )
    for level, (name, metric, first, second, band, top) in enumerate(levels, start=2):
        if first == 0:
            return _finish(out)
        metrics[metric] = ratio = second / first
        score = band_score(ratio, band, top)
        if score is None:
            return _finish(out)
        setattr(out, name, score)
        out.levels_passed = level

    # L4 style: transition categories and content-word overlap.
    text = c2 if cfg.transition_text == "c2" else c1 + "\n" + c2
    k = len(transition_categories(text, cfg.transition_match))
    trans = min(1.0, cfg.transition_base + cfg.transition_step * (k - 1)) if k else 0.0
    jac = jaccard(c1, c2)
    overlap = min(jac, cfg.jaccard_cap) / cfg.jaccard_cap
    metrics.update(transition_categories=k, transition_score=trans, jaccard=jac)
    out.style = cfg.transition_weight * trans + cfg.jaccard_weight * overlap
    out.levels_passed = 4
    return _finish(out)


def _finish(out: WritingScore) -> WritingScore:
    out.total = out.structure + out.length_ratio + out.unique_words + out.style
    return out


def score_batch(
    completions_1: Sequence[str], completions_2: Sequence[str], cfg: WritingRewardConfig
) -> list[WritingScore]:
    """Score aligned lists of joint actions (one pair per index)."""
    if len(completions_1) != len(completions_2):
        raise ValueError(
            "completions: agent lists differ in length "
            f"({len(completions_1)} vs {len(completions_2)})"
        )
    return [score_pair(a, b, cfg) for a, b in zip(completions_1, completions_2)]


# --------------------------------------------------------------------------------------
# CoMLRL-style callables: reward_func(*completions, batch_items=, prompts=) -> list[float]
# --------------------------------------------------------------------------------------


def tldr_reward(
    completions_1: Sequence[str],
    completions_2: Sequence[str],
    batch_items: Sequence[dict] | None = None,
    prompts: Sequence[str] | None = None,
    config: WritingRewardConfig | None = None,
) -> list[float]:
    """TLDR team reward per joint action (``batch_items``/``prompts`` unused; kept for the API)."""
    cfg = config or WritingRewardConfig.tldr()
    return [s.total for s in score_batch(completions_1, completions_2, cfg)]


def arxiv_reward(
    completions_1: Sequence[str],
    completions_2: Sequence[str],
    batch_items: Sequence[dict] | None = None,
    prompts: Sequence[str] | None = None,
    variant: str = "paper",
    config: WritingRewardConfig | None = None,
) -> list[float]:
    """arXiv team reward per joint action, under the ``variant`` thresholds (or ``config``)."""
    cfg = config or WritingRewardConfig.arxiv(variant)
    return [s.total for s in score_batch(completions_1, completions_2, cfg)]
