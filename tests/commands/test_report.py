"""``teamrl report``'s data side: samples.jsonl holds whole joint groups with prompts and tree
positions, eval_samples.jsonl every held-out output, resumes.jsonl each resume; the page's
JSON, its Content-Security-Policy, a long run's bounded data; one-line errors. The page in a
browser: tests/browser; malformed run files: test_run_records.py."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from html.parser import HTMLParser

import pytest
from helpers.cli import one_line_error
from helpers.report_files import SPIKE, SPIKE_STEP, eval_reward, loss, write_long_run
from helpers.report_runs import G, at_grpo_run, joint_reward, magrpo_run, turn_reward
from helpers.rollout_joint import ScriptedTeam, reward_table, two_turn_env

from teamrl.algorithms.magrpo import joint_rollout
from teamrl.commands.plot import ema, plot_panels
from teamrl.commands.report import PLACEHOLDER, _samples, render, report_data
from teamrl.config import ConfigError, load_config
from teamrl.envs.functional import FunctionEnv
from teamrl.run.files import read_jsonl
from teamrl.run.logging import sample_rows

# the resumed call raises train.max_steps, which the trainer says it applies from then on
pytestmark = pytest.mark.filterwarnings("ignore:resuming from")


@pytest.fixture(scope="module")
def magrpo(tmp_path_factory):
    """A MAGRPO run to step 1, resumed to step 2."""
    run = tmp_path_factory.mktemp("report") / "magrpo"
    magrpo_run(run, steps=1)
    magrpo_run(run, steps=2, resume=True)
    return run


@pytest.fixture(scope="module")
def at_grpo(tmp_path_factory):
    run = tmp_path_factory.mktemp("report") / "at_grpo"
    at_grpo_run(run)
    return run


def test_magrpo_logs_each_step_one_examples_whole_joint_group(magrpo):
    rows = read_jsonl(magrpo / "samples.jsonl")
    assert sorted({r["step"] for r in rows}) == [1, 2]
    for step in (1, 2):
        mine = [r for r in rows if r["step"] == step]
        # log.num_groups_to_log=1 of train.prompts_per_step=2: one example, all of its samples
        assert {r["slot"] for r in mine} == {0}
        assert Counter(r["agent"] for r in mine) == {"alice": G, "bob": G}
        assert sorted(r["index"] for r in mine if r["agent"] == "alice") == list(range(G))
        assert all(r["node"] == "root" and r["parent"] is None for r in mine)
        assert all(r["prompt"] and f"Say {r['example']}." in r["prompt"] for r in mine)
        # aligned: joint action j pairs alice's j-th and bob's j-th completion
        joints: dict[str, dict[str, dict]] = {}
        for r in mine:
            (jid,) = r["joint"]
            joints.setdefault(jid, {})[r["agent"]] = r
        assert sorted(joints) == [str(j) for j in range(G)]
        for jid, pair in joints.items():
            texts = {a: r["completion"] for a, r in pair.items()}
            want = joint_reward(texts, {})
            for r in pair.values():
                assert r["index"] == int(jid)
                assert r["team_reward"] == r["reward"] == r["return"] == want
                assert r["joint_team_rewards"] == [want] and r["local_reward"] == 0.0


def test_every_evaluation_logs_every_held_out_output_and_a_resume_is_recorded(magrpo):
    rows = read_jsonl(magrpo / "eval_samples.jsonl")
    # before the first step, after step 1, and after step 2 (the resumed call)
    assert sorted({r["step"] for r in rows}) == [0, 1, 2]
    for step in (0, 1, 2):
        mine = [r for r in rows if r["step"] == step]
        assert sorted((r["example"], r["agent"]) for r in mine) == [
            (e, a) for e in (0, 1) for a in ("alice", "bob")
        ]
        for e in (0, 1):
            pair = {r["agent"]: r["completion"] for r in mine if r["example"] == e}
            ret = {r["episode_return"] for r in mine if r["example"] == e}
            assert ret == {joint_reward(pair, {})}
    assert [r["step"] for r in read_jsonl(magrpo / "resumes.jsonl")] == [1]
    data = report_data(magrpo)
    assert data["resumes"] == [1] and data["steps"] == [0, 1, 2]
    assert data["evals"]["first"] == 0 and data["evals"]["last"] == 2
    assert {r["step"] for r in data["evals"]["rows"]} == {0, 2}


def test_a_fresh_start_in_a_used_folder_forgets_its_resumes(magrpo, tmp_path):
    run = tmp_path / "again"
    magrpo_run(run, steps=1)
    magrpo_run(run, steps=2, resume=True)
    assert (run / "resumes.jsonl").exists()
    magrpo_run(run, steps=1, **{"log.overwrite": True})
    assert not (run / "resumes.jsonl").exists()


def test_at_grpo_logs_every_candidate_and_the_one_that_continued(at_grpo):
    rows = read_jsonl(at_grpo / "samples.jsonl")
    nodes: dict[tuple, list[dict]] = {}
    for r in rows:
        nodes.setdefault((r["turn"], r["agent"]), []).append(r)
    assert sorted(nodes) == [(t, a) for t in (0, 1) for a in ("alice", "bob")]
    for cands in nodes.values():
        assert sorted(r["candidate"] for r in cands) == list(range(G))
        for r in cands:
            assert r["reward"] == r["team_reward"] == r["return"] == turn_reward(r["completion"])
        (chosen,) = [r for r in cands if r["continued"]]
        assert chosen["reward"] == max(r["reward"] for r in cands)  # algorithm.selection=greedy
    evals = read_jsonl(at_grpo / "eval_samples.jsonl")
    assert sorted({r["step"] for r in evals}) == [0, 1]
    assert all(r["candidate"] == 0 and r["continued"] for r in evals)


def test_the_cross_product_lists_every_joint_action_of_a_sample():
    table = {(0, 0): 1.0, (0, 1): 2.0, (1, 0): 3.0, (1, 1): 5.0}
    env = lambda: FunctionEnv(["a", "b"], reward_table(table))  # noqa: E731
    result = joint_rollout(
        ScriptedTeam(),
        env,
        [(7, {"prompt": "p"})],
        num_generations=2,
        max_turns=1,
        joint_mode="cross",
    )
    rows = sample_rows(result.samples, 1, None, lambda agent, ids: f"prompt of {agent}")
    a1 = next(r for r in rows if r["agent"] == "a" and r["index"] == 1)
    # a's completion 1 acts in joint actions (1, 0) and (1, 1): ids 2 and 3 of the product
    assert a1["joint"] == ["2", "3"] and a1["joint_team_rewards"] == [3.0, 5.0]
    assert a1["team_reward"] == 4.0 and a1["prompt"] == "prompt of a" and a1["example"] == 7


def test_a_multi_turn_tree_names_each_node_and_its_parent():
    result = joint_rollout(
        ScriptedTeam(), two_turn_env, [(0, {"prompt": "p"})], num_generations=2, max_turns=2
    )
    rows = sample_rows(result.samples, 1, 1)
    assert {(r["node"], r["parent"]) for r in rows} == {
        ("root", None),
        ("0", "root"),
        ("1", "root"),
    }
    child = [r for r in rows if r["node"] == "1"]
    assert sorted(j for r in child for j in r["joint"]) == ["1/0", "1/0", "1/1", "1/1"]
    # the child of branch 1 pays 10 * 1 + k for its joint action k
    assert sorted(r["joint_team_rewards"][0] for r in child) == [10.0, 10.0, 11.0, 11.0]
    assert all(r["prompt"] is None for r in rows)  # no decoder given


def _write_run(tmp_path, metrics, samples=(), evals=(), resumes=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, rows in [
        ("metrics", metrics),
        ("samples", samples),
        ("eval_samples", evals),
        ("resumes", resumes),
    ]:
        if rows:
            (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_report_data_lines_the_steps_up_and_picks_the_panels(tmp_path):
    metrics = [
        {"step": 0, "eval/reward/mean": 0.1, "eval/completion_length/mean": 3.0},
        {"step": 1, "reward/mean": 1.0, "reward/std": 0.5, "advantage/mean/x": 0.0,
         "advantage/std/x": 1.0, "loss/x": float("nan"), "kl_sampler_k1/x": 0.0},
        {"step": 2, "reward/mean": 2.0, "reward/std": 0.5, "advantage/mean/x": 0.0,
         "advantage/std/x": 1.0, "loss/x": 0.25, "eval/reward/mean": 0.4},
    ]  # fmt: skip
    run = _write_run(tmp_path / "run", metrics, resumes=[{"step": 1}])
    data = report_data(run)
    assert data["steps"] == [0, 1, 2]
    assert data["series"]["reward/mean"] == [None, 1.0, 2.0]
    assert data["series"]["eval/reward/mean"] == [0.1, None, 0.4]
    assert data["series"]["loss/x"] == [None, None, 0.25]  # NaN is a gap, not a point
    panels = {p["title"]: p for p in data["panels"]}
    assert panels["team reward"]["keys"] == ["reward/mean", "eval/reward/mean"]
    assert panels["team reward"]["bands"] == {"reward/mean": "reward/std"}
    assert panels["advantage per agent"]["bands"] == {"advantage/mean/x": "advantage/std/x"}
    assert panels["KL"]["keys"] == ["kl_sampler_k1/x"]
    assert panels["evaluation"]["keys"] == ["eval/reward/mean"]
    assert data["resumes"] == [1] and data["agents"] == ["x"]  # from the metrics' keys
    assert any("samples.jsonl has no samples" in n for n in data["notes"])
    assert any("No evaluation outputs" in n for n in data["notes"])


def test_the_page_inlines_its_data_so_no_text_can_close_the_script(tmp_path):
    hostile = "</script><script>alert(1)</script>"
    sample = {"step": 1, "example": 0, "slot": 0, "agent": "a", "turn": 0, "completion": hostile}
    run = _write_run(tmp_path / "run", [{"step": 1, "reward/mean": 1.0}], samples=[sample])
    page = render(report_data(run))
    assert PLACEHOLDER not in page and hostile not in page
    start = page.index('type="application/json">') + len('type="application/json">')
    data = json.loads(page[start : page.index("</script>", start)])
    assert data["samples"][0]["completion"] == hostile
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page


def test_a_long_runs_samples_keep_evenly_spread_steps(tmp_path):
    rows = [{"step": s, "agent": a} for s in range(1, 6) for a in ("a", "b")]
    run = _write_run(tmp_path / "run", [{"step": 1}], samples=rows)
    notes: list[str] = []
    kept = _samples(run / "samples.jsonl", 3, notes, [])
    assert kept == [r for r in rows if r["step"] in (1, 3, 5)]
    assert notes == ["samples.jsonl logs 5 steps: the page holds 3 of them."]
    assert _samples(run / "samples.jsonl", 5, notes, []) == rows and len(notes) == 1


def test_bad_run_folders_are_one_line_errors(tmp_path, capsys):
    line = one_line_error(capsys, "report", str(tmp_path / "absent"))
    assert "absent is not a folder" in line
    line = one_line_error(capsys, "report", str(tmp_path))
    assert "holds no metrics.jsonl: is it a teamrl run folder?" in line
    (tmp_path / "metrics.jsonl").write_text("")
    assert "has no rows yet" in one_line_error(capsys, "report", str(tmp_path))
    line = one_line_error(capsys, "plot", str(tmp_path), "--smooth", "1")
    assert "--smooth: expected an EMA weight in [0, 1), got 1.0" in line


def test_the_old_samples_setting_is_refused_with_the_new_name():
    with pytest.raises(ConfigError, match=r"did you mean 'log.num_groups_to_log'\?"):
        load_config(None, ["log.num_completions_to_log=2"])


def test_plot_smooths_with_a_bias_corrected_ema_and_has_a_per_agent_panel():
    # w = 0.5: s1 = 0.5 * 2 / 0.5 = 2; s2 = (0.5 + 0.5 * 4) / 0.75 = 10/3
    assert ema([2.0, 4.0], 0.5) == [2.0, pytest.approx(10 / 3)]
    assert ema([2.0, 4.0], 0.0) == [2.0, 4.0]
    keys = {"reward/mean", "reward/agent/a/mean", "advantage/mean/a", "loss/a"}
    assert plot_panels(keys) == [
        ("team reward", ["reward/mean"]),
        ("reward per agent", ["reward/agent/a/mean"]),
        ("advantage per agent", ["advantage/mean/a"]),
        ("loss", ["loss/a"]),
    ]


class PageParts(HTMLParser):
    """A page's Content-Security-Policy (from its meta tag) and its inline scripts and styles,
    each with its attributes and its text exactly as a browser hashes it."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=False)
        self.csp: str | None = None
        self.blocks: list[tuple[str, dict, str]] = []  # (tag, attributes, text)
        self._open: tuple[str, dict] | None = None
        self._text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "content-security-policy":
            assert self.csp is None, "two CSP meta tags"
            self.csp = attrs["content"]
        if tag in ("script", "style"):
            self._open, self._text = (tag, attrs), []

    def handle_data(self, data):
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if self._open is not None and tag == self._open[0]:
            self.blocks.append((*self._open, "".join(self._text)))
            self._open = None


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_page_runs_only_its_own_scripts_and_styles_by_hash(tmp_path):
    sample = {"step": 1, "example": 0, "slot": 0, "agent": "a", "turn": 0, "completion": "x"}
    run = _write_run(tmp_path / "run", [{"step": 1, "reward/mean": 1.0}], samples=[sample])
    parts = PageParts(render(report_data(run)))
    assert parts.csp is not None
    policy = {}
    for directive in parts.csp.split(";"):
        name, *sources = directive.split()
        policy[name] = sources
    assert "'unsafe-inline'" not in parts.csp and "'unsafe-eval'" not in parts.csp
    assert policy["default-src"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"] and policy["form-action"] == ["'none'"]
    scripts = [
        text
        for tag, attrs, text in parts.blocks
        if tag == "script" and attrs.get("type", "text/javascript") == "text/javascript"
    ]
    styles = [text for tag, _, text in parts.blocks if tag == "style"]
    assert scripts and styles
    assert not any(attrs.get("src") for tag, attrs, _ in parts.blocks if tag == "script")
    # every source is a hash, and every inline script and style has its own listed
    assert all(src.startswith("'sha256-") for src in policy["script-src"] + policy["style-src"])
    assert sorted(policy["script-src"]) == sorted(_sha256(t) for t in scripts)
    assert sorted(policy["style-src"]) == sorted(_sha256(t) for t in styles)
    # the data's tag is JSON, which no browser runs, so it needs no hash
    assert [attrs.get("type") for tag, attrs, _ in parts.blocks if tag == "script"] == [
        "application/json",
        None,
    ]


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    return write_long_run(tmp_path_factory.mktemp("long") / "run", steps=100_000)


def test_a_100000_step_runs_curves_keep_every_spike_in_a_bounded_page(long_run):
    data = report_data(long_run)
    assert data["span"] == [1, 100_000]
    # at most 1,000 points, each the mean of 100 consecutive steps, shaded min to max
    assert len(data["steps"]) == 1000 and data["per_point"] == 100
    assert data["spans"][0] == [1, 100] and data["spans"][-1] == [99_901, 100_000]
    assert all(b[0] == a[1] + 1 for a, b in zip(data["spans"], data["spans"][1:]))
    assert all(lo <= x <= hi for x, (lo, hi) in zip(data["steps"], data["spans"]))
    for key, ys in data["series"].items():
        assert len(ys) == len(data["steps"]) and len(data["ranges"][key][0]) == len(ys)
    i = (SPIKE_STEP - 1) // 100  # the run of steps holding the spike
    lows, highs = data["ranges"]["loss/alice"]
    assert highs[i] == SPIKE == max(highs)
    first = [loss(s) for s in range(1, 101)]
    assert data["series"]["loss/alice"][0] == pytest.approx(sum(first) / 100)
    assert lows[0] == min(first) and highs[0] == max(first)
    # evaluations (every 1000 steps) are sparser than a run: each keeps its own value
    evals = [
        (x, y) for x, y in zip(data["steps"], data["series"]["eval/reward/mean"]) if y is not None
    ]
    assert [y for _, y in evals] == [eval_reward(s) for s in range(1000, 100_001, 1000)]
    assert any(
        "each curve point is the mean of a run of up to 100 steps" in n for n in data["notes"]
    )
    # 101 evaluations: the page names the first and last ten, counts them all, shows two
    ev = data["evals"]
    assert ev["count"] == 101 and len(ev["steps"]) == 20
    assert ev["steps"][:2] == [0, 1000] and ev["steps"][-1] == 100_000
    assert {r["step"] for r in ev["rows"]} == {0, 100_000}
    assert len(data["samples"]) == 200 * 4  # 200 of 2000 logged steps, 4 samples each
    assert len(render(data)) < 1_000_000  # the metrics file alone is 16 MB
