"""Writing tasks: the gated 4-level reward, the loaders, the offline set and the envs.

Hand-made completions are built from vowel-free words ("kq", "kkxz", ...) so that no
transition phrase and no stopword can match by accident; every expected score below is
worked out by hand from the formulas in teamrl/tasks/writing/reward.py.
"""

from __future__ import annotations

import json

import pytest

from teamrl.envs.base import clone
from teamrl.tasks.registry import make_task, registered_tasks
from teamrl.tasks.writing.data import load_arxiv, load_tldr, offline_texts
from teamrl.tasks.writing.reward import (
    WritingRewardConfig,
    arxiv_reward,
    band_score,
    jaccard,
    score_pair,
    tldr_reward,
    transition_categories,
)

TLDR = WritingRewardConfig.tldr()
PAPER = WritingRewardConfig.arxiv("paper")
CURRENT = WritingRewardConfig.arxiv("current")


def W(tag: str, n: int) -> list[str]:
    """n distinct words: ``tag`` + i written in base 3 over the letters q, x, z."""
    out = []
    for i in range(n):
        code = ""
        while True:
            code = "qxz"[i % 3] + code
            i //= 3
            if i == 0:
                break
        out.append(tag + code)
    return out


def fit(words: list[str], n_chars: int) -> str:
    """Join with single spaces and pad the last word with 'w' to exactly ``n_chars``."""
    text = " ".join(words)
    assert len(text) <= n_chars, (len(text), n_chars)
    return text + "w" * (n_chars - len(text))


def levels(s) -> tuple[float, float, float, float]:
    return (s.structure, s.length_ratio, s.unique_words, s.style)


# --------------------------------------------------------------------------------------
# Reward levels (TLDR)
# --------------------------------------------------------------------------------------


def test_helpers_build_what_they_claim():
    assert W("k", 4) == ["kq", "kx", "kz", "kxq"]
    text = fit(W("k", 8), 40)
    assert len(text) == 40 and len(text.split()) == 8 and len(set(text.split())) == 8
    assert transition_categories(text) == set()


def test_tldr_full_pair_ratio_two():
    # chars 80/40 = 2.0 -> L2 = 1; uniq 16/8 = 2.0 -> L3 = 0.5;
    # no transitions -> T = 0; Jaccard 8/16 = 0.5 >= 0.03 -> J = 1 -> L4 = 0.6.
    c1 = fit(W("k", 8), 40)
    c2 = fit(W("k", 8) + W("kk", 8), 80)
    s = score_pair(c1, c2, TLDR)
    assert levels(s) == pytest.approx((0.5, 1.0, 0.5, 0.6))
    assert s.total == pytest.approx(2.6)
    assert s.levels_passed == 4
    assert s.metrics["char_ratio"] == 2.0 and s.metrics["unique_ratio"] == 2.0


def test_tldr_length_ramps():
    c1_words, c2_words = W("k", 8), W("k", 8) + W("kk", 8)
    # rising ramp: 81/60 = 1.35 -> (1.35 - 1.1) / (1.6 - 1.1) = 0.5
    s = score_pair(fit(c1_words, 60), fit(c2_words, 81), TLDR)
    assert s.length_ratio == pytest.approx(0.5)
    assert s.total == pytest.approx(0.5 + 0.5 + 0.5 + 0.6)
    # falling ramp: 164/40 = 4.1 -> 1 - (4.1 - 3.2) / (5.0 - 3.2) = 0.5
    s = score_pair(fit(c1_words, 40), fit(c2_words, 164), TLDR)
    assert s.length_ratio == pytest.approx(0.5)
    # ratio 1.0 < 1.1: L2 fails and stops the scoring, although uniq ratio would be 2.0
    s = score_pair(fit(c1_words, 65), fit(c2_words, 65), TLDR)
    assert levels(s) == (0.5, 0.0, 0.0, 0.0) and s.total == 0.5 and s.levels_passed == 1


def test_tldr_structure_gate_stops_everything():
    good_c2 = fit(W("k", 8) + W("kk", 8), 80)
    # 7 whitespace tokens < 8: total 0 although the rest would score
    s = score_pair(fit(W("k", 7), 40), good_c2, TLDR)
    assert s.total == 0.0 and levels(s) == (0, 0, 0, 0) and s.levels_passed == 0
    # 257 tokens > 256 in c2
    s = score_pair(fit(W("k", 8), 40), " ".join(W("k", 257)), TLDR)
    assert s.total == 0.0 and s.levels_passed == 0


def test_tldr_unique_words_ramp_and_stop():
    # uniq 33/20 = 1.65 -> 0.5 * (1.65 - 1.3) / (2.0 - 1.3) = 0.25; chars 200/100 = 2 -> 1.0
    s = score_pair(fit(W("k", 20), 100), fit(W("k", 20) + W("kk", 13), 200), TLDR)
    assert s.unique_words == pytest.approx(0.25)
    assert s.total == pytest.approx(0.5 + 1.0 + 0.25 + 0.6)
    # uniq 12/10 = 1.2 < 1.3: L3 fails, L4 is never scored
    s = score_pair(fit(W("k", 10), 60), fit(W("k", 10) + W("kk", 2), 120), TLDR)
    assert levels(s) == (0.5, 1.0, 0.0, 0.0) and s.levels_passed == 2


def test_tldr_style_transitions_in_c2_and_jaccard_below_cap():
    c1 = fit(W("k", 8), 60)
    c2 = fit(["however,", "for", "example", "finally"] + W("k", 8) + W("kk", 4), 120)
    assert transition_categories(c2) == {"contrast", "example", "sequence"}
    # uniq 16/8 = 2 -> 0.5; T = 0.4 + 0.05 * 2 = 0.5; Jaccard 8/15 -> capped -> 1
    s = score_pair(c1, c2, TLDR)
    assert s.style == pytest.approx(0.4 * 0.5 + 0.6 * 1.0)
    assert s.metrics["transition_categories"] == 3

    # TLDR looks for transitions in c2 only: "however" in c1 adds nothing
    c1 = fit(["however"] + W("k", 8), 60)
    c2 = fit(W("k", 8) + W("kk", 10), 150)  # uniq 18/9 = 2; chars 2.5
    assert score_pair(c1, c2, TLDR).style == pytest.approx(0.6)

    # Jaccard 1/34 under the 0.03 cap -> J = (1/34) / 0.03; uniq 25/10 = 2.5 -> 0.5
    c1 = fit(W("k", 10), 60)
    c2 = fit(W("k", 1) + W("kk", 24), 150)
    assert jaccard(c1, c2) == pytest.approx(1 / 34)
    s = score_pair(c1, c2, TLDR)
    assert s.style == pytest.approx(0.6 * (1 / 34) / 0.03)
    assert s.total == pytest.approx(0.5 + 1.0 + 0.5 + 0.6 * (1 / 34) / 0.03)


def test_transition_scale_caps_and_match_modes():
    # substring matching (the paper's): "also" holds "so" too
    assert transition_categories("I also went") == {"addition", "cause_effect"}
    assert transition_categories("I also went", match="word") == {"addition"}
    assert transition_categories("It ended. However.", match="word") == {"contrast"}
    assert transition_categories("different", match="substring") == {"condition"}  # "if"
    assert transition_categories("different", match="word") == set()


def test_band_score_and_stopwords_in_jaccard():
    band = (1.1, 1.6, 3.2, 5.0)
    assert band_score(2.0, band, 1.0) == 1.0
    assert band_score(1.1, band, 1.0) == 0.0  # on the base edge: 0 but not a stop
    assert band_score(1.09, band, 1.0) is None and band_score(5.01, band, 1.0) is None
    # stopwords leave the Jaccard sets: {cat} vs {cat, dog} -> 1/2
    assert jaccard("the cat and the", "a cat with a dog") == pytest.approx(0.5)


# --------------------------------------------------------------------------------------
# arXiv: both variants, transitions in c1 + c2, Jaccard normalised at 0.23
# --------------------------------------------------------------------------------------


def test_arxiv_variants_score_a_crafted_pair_differently():
    # 131 and 130 tokens (in 128..256); uniq 130/131 in [0.7, 1.3] -> 0.5; Jaccard 0;
    # "however" in c1 counts for arXiv (c1 + c2) -> T = 0.4 -> L4 = 0.16.
    c1 = fit(["however"] + W("k", 130), 1000)
    c2 = fit(W("kk", 130), 1400)  # chars 1.4
    paper, current = score_pair(c1, c2, PAPER), score_pair(c1, c2, CURRENT)
    # paper: 1.4 on the falling ramp (1.3, 1.5] -> 1 - 0.1 / 0.2 = 0.5; current: top [1.3, 1.6]
    assert levels(paper) == pytest.approx((0.5, 0.5, 0.5, 0.16))
    assert levels(current) == pytest.approx((0.5, 1.0, 0.5, 0.16))
    assert paper.total == pytest.approx(1.66) and current.total == pytest.approx(2.16)

    # chars 1.7: outside the paper's base (> 1.5) -> stop; current: 1 - (1.7 - 1.6) / 0.4
    c2 = fit(W("kk", 130), 1700)
    assert score_pair(c1, c2, PAPER).total == pytest.approx(0.5)
    assert score_pair(c1, c2, CURRENT).length_ratio == pytest.approx(0.75)
    assert arxiv_reward([c1], [c2], variant="current") == pytest.approx([0.5 + 0.75 + 0.5 + 0.16])


def test_arxiv_jaccard_normalised_at_023_and_token_floor():
    c1 = fit(W("k", 130), 1000)
    c2 = fit(W("k", 20) + W("kk", 110), 1200)  # 20 shared of 240 -> J = 1/12
    s = score_pair(c1, c2, CURRENT)
    assert s.metrics["jaccard"] == pytest.approx(1 / 12)
    assert s.style == pytest.approx(0.6 * (1 / 12) / 0.23)
    # 127 tokens < 128: arXiv L1 fails where TLDR's (8..256) would pass
    short = fit(W("k", 127), 1000)
    assert score_pair(short, c2, PAPER).total == 0.0


def test_breakdown_sums_to_total_on_real_text():
    rows = offline_texts("train")[:16]
    scores = []
    for row in rows:
        first = row["body"].split(". ")[0] + "."
        scores.append(score_pair(first, row["body"], TLDR))
        scores.append(score_pair(row["title"], first, TLDR))
    for s in scores:
        assert sum(s.components().values()) == pytest.approx(s.total)
    assert any(s.levels_passed == 4 for s in scores)  # the sum covers all four levels
    assert any(s.levels_passed < 4 for s in scores)


def test_comlrl_callable_and_config_errors():
    c1, c2 = fit(W("k", 8), 40), fit(W("k", 8) + W("kk", 8), 80)
    bad = fit(W("k", 7), 40)
    out = tldr_reward([c1, bad], [c2, c2], batch_items=[{}, {}], prompts=["p", "p"])
    assert out == pytest.approx([2.6, 0.0])
    with pytest.raises(ValueError, match="differ in length"):
        tldr_reward([c1], [c2, c2])
    with pytest.raises(ValueError, match="variant"):
        WritingRewardConfig.arxiv("head")
    with pytest.raises(ValueError, match="transition_match"):
        WritingRewardConfig.tldr(transition_match="regex")
    with pytest.raises(ValueError, match="length_band"):
        WritingRewardConfig.tldr(length_band=(2.0, 1.0, 3.0, 4.0))


# --------------------------------------------------------------------------------------
# Loaders on local fixture folders in the upstream formats
# --------------------------------------------------------------------------------------


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _tldr_rows(n, tag):
    return [
        {
            "prompt": f"SUBREDDIT: r/{tag}\n\nTITLE: Title {i}\n\nPOST: Body {tag} {i}.\n\nTL;DR:",
            "completion": f" short {tag} {i}",
        }
        for i in range(n)
    ]


def test_load_tldr_normalises_rows(tmp_path, hf_cache):
    folder = tmp_path / "tldr"
    folder.mkdir()
    for split in ("train", "validation", "test"):
        _write_jsonl(folder / f"{split}.jsonl", _tldr_rows(3, split))
    rows = load_tldr("validation", dataset_id=str(folder))
    assert len(rows) == 3
    assert (
        rows[1]["text"] == "SUBREDDIT: r/validation\n\nTITLE: Title 1\n\nPOST: Body validation 1."
    )
    assert rows[1]["subreddit"] == "r/validation" and rows[1]["title"] == "Title 1"
    assert rows[1]["post"] == "Body validation 1." and rows[1]["reference"] == "short validation 1"
    assert rows[1]["prompt"].endswith("TL;DR:")
    assert len(load_tldr("train", limit=2, dataset_id=str(folder))) == 2

    task = make_task("tldr", source="hub", dataset_id=str(folder), limit=2)
    assert [len(task.train), len(task.eval), len(task.test)] == [2, 2, 2]
    assert "r/test" in task.test[0]["text"] and "r/validation" in task.eval[0]["text"]


def test_load_tldr_malformed_row_and_missing_column(tmp_path, hf_cache):
    folder = tmp_path / "bad"
    folder.mkdir()
    rows = _tldr_rows(3, "train")
    rows[1]["prompt"] = "   "
    _write_jsonl(folder / "train.jsonl", rows)
    with pytest.raises(ValueError, match=r"row 1: field 'prompt'"):
        load_tldr("train", dataset_id=str(folder))

    folder = tmp_path / "nocol"
    folder.mkdir()
    _write_jsonl(folder / "train.jsonl", [{"prompt": "SUBREDDIT: r/x TITLE: t POST: p TL;DR:"}])
    with pytest.raises(ValueError, match="completion"):
        load_tldr("train", dataset_id=str(folder))


def _arxiv_folder(tmp_path, rows):
    folder = tmp_path / "arxiv"
    folder.mkdir()
    # the hub set names its splits train and val
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        "  - split: train\n    path: train.jsonl\n  - split: val\n    path: val.jsonl\n---\n"
    )
    _write_jsonl(folder / "train.jsonl", rows)
    _write_jsonl(folder / "val.jsonl", rows)
    return folder


def test_load_arxiv_and_hub_task_splits(tmp_path, hf_cache):
    sentences = ["<S> we study x{} . </S>", "<S> it works . </S>"]
    rows = [
        {"article_id": f"a{i}", "abstract_text": [s.format(i) for s in sentences], "token_count": 7}
        for i in range(4)
    ]
    folder = _arxiv_folder(tmp_path, rows)
    out = load_arxiv("train", dataset_id=str(folder))
    assert out[2] == {"id": "a2", "text": "we study x2 . it works .", "token_count": 7}

    task = make_task("arxiv", source="hub", dataset_id=str(folder))
    assert [r["id"] for r in task.eval] == ["a0", "a1"]  # val[:50%]
    assert [r["id"] for r in task.test] == ["a2", "a3"]  # val[50%:], disjoint from eval


def test_load_arxiv_malformed_row(tmp_path, hf_cache):
    rows = [{"article_id": f"a{i}", "abstract_text": ["<S> fine . </S>"]} for i in range(3)]
    rows[2]["abstract_text"] = None
    folder = _arxiv_folder(tmp_path, rows)
    with pytest.raises(ValueError, match=r"row 2: field 'abstract_text'"):
        load_arxiv("val", dataset_id=str(folder))


# --------------------------------------------------------------------------------------
# Offline set
# --------------------------------------------------------------------------------------


def test_offline_sizes_lengths_disjoint_and_deterministic():
    splits = {s: offline_texts(s) for s in ("train", "eval", "test")}
    assert len(splits["train"]) >= 48 and len(splits["eval"]) >= 16 and len(splits["test"]) >= 16
    for rows in splits.values():
        for r in rows:
            assert 60 <= len(r["text"].split()) <= 150, r["text"]
    texts = {s: {r["text"] for r in rows} for s, rows in splits.items()}
    assert all(len(texts[s]) == len(splits[s]) for s in splits)  # no duplicate within a split
    assert not texts["train"] & texts["eval"]
    assert not texts["train"] & texts["test"] and not texts["eval"] & texts["test"]
    assert offline_texts("train") == splits["train"]  # same seed, same rows
    assert offline_texts("train", seed=1) != splits["train"]
    assert {r["kind"] for r in splits["train"]} == {"news", "post"}
    with pytest.raises(ValueError, match="offline split"):
        offline_texts("validation")


# --------------------------------------------------------------------------------------
# Envs
# --------------------------------------------------------------------------------------


def test_tasks_registered_and_tldr_env_contract():
    assert {"tldr", "arxiv"} <= set(registered_tasks())
    task = make_task("tldr")  # offline by default
    env = task.make_env()
    assert env.agents == ["concise", "detailed"] == list(task.agents)
    example = task.train[0]
    obs = env.reset(example)
    assert set(obs) == {"concise", "detailed"}
    assert all(example["text"] in o for o in obs.values())
    assert obs["concise"] != obs["detailed"] and "concise" in obs["concise"]

    c1, c2 = fit(W("k", 8), 40), fit(W("k", 8) + W("kk", 8), 80)
    branch = clone(env)
    step = env.step({"concise": c1, "detailed": c2})
    assert step.reward == pytest.approx(2.6)
    assert step.reward_components == pytest.approx(
        {"structure": 0.5, "length_ratio": 1.0, "unique_words": 0.5, "style": 0.6}
    )
    assert step.terminations == {"concise": True, "detailed": True} and step.done
    # the clone still holds the episode: agent order matters (c1 = concise)
    assert branch.step({"concise": c2, "detailed": c1}).reward == pytest.approx(0.5)

    with pytest.raises(ValueError, match="expected actions"):
        env.step({"concise": c1})
    with pytest.raises(RuntimeError, match="reset"):
        task.make_env().step({"concise": c1, "detailed": c2})
    with pytest.raises(ValueError, match="'text'"):
        env.reset({"prompt": "no text field"})
    with pytest.raises(ValueError, match="source"):
        make_task("tldr", source="web")


def test_arxiv_env_variants_and_limit():
    c1 = fit(["however"] + W("k", 130), 1000)
    c2 = fit(W("kk", 130), 1400)
    rewards = {}
    for variant in ("paper", "current"):
        task = make_task("arxiv", variant=variant, limit=5)
        assert len(task.train) == 5 and list(task.agents) == ["background", "methods"]
        env = task.make_env()
        env.reset(task.eval[0])
        rewards[variant] = env.step({"background": c1, "methods": c2}).reward
    assert rewards == pytest.approx({"paper": 1.66, "current": 2.16})
    word = make_task("arxiv", reward={"transition_match": "word"}).make_env()
    assert word.reward_config.transition_match == "word"


def test_one_reward_config_with_a_preset_per_task():
    # TLDR's thresholds are the defaults; arXiv differs in five fields, variant sets L2.
    assert WritingRewardConfig.tldr() == WritingRewardConfig()
    paper = WritingRewardConfig.arxiv("paper")
    assert (paper.min_tokens, paper.max_tokens) == (128, 256)
    assert paper.length_band == (0.8, 1.0, 1.3, 1.5)
    assert paper.unique_band == (0.5, 0.7, 1.3, 1.7)
    assert (paper.transition_text, paper.jaccard_cap) == ("both", 0.23)
    assert WritingRewardConfig.arxiv("current").length_band == (0.8, 1.3, 1.6, 2.0)
    assert WritingRewardConfig.arxiv("current", jaccard_cap=0.5).jaccard_cap == 0.5


def test_writing_step_sets_the_protocol_fields():
    env = make_task("tldr").make_env()
    env.reset({"text": "A post about a lost cat."})
    c1, c2 = fit(W("k", 8), 40), fit(W("k", 8) + W("kk", 8), 80)
    step = env.step({"concise": c1, "detailed": c2})
    assert step.reward_components == pytest.approx(
        {"structure": 0.5, "length_ratio": 1.0, "unique_words": 0.5, "style": 0.6}
    )
    assert step.success is None and step.pending is False  # writing has no notion of success
