"""``teamrl report``'s page in headless Chromium (``make test-browser``): it loads from file://
with no request and no error, draws its curves, filters its sample table, and draws the rollout
trees of tiny runs whose rewards are functions of the texts (tests/helpers/report_runs.py); its
Content-Security-Policy runs its own script and nothing else; a 100,000-step run
(tests/helpers/report_files.py) draws every section."""

from __future__ import annotations

import pytest
from helpers.report_files import write_long_run, write_rows
from helpers.report_runs import G, at_grpo_run, joint_reward, magrpo_run, turn_reward

from teamrl.commands.report import report_data, write_report
from teamrl.commands.report_browser import missing, open_report
from teamrl.run.files import read_jsonl

pytestmark = [
    pytest.mark.skipif(missing() is not None, reason=str(missing())),
    pytest.mark.filterwarnings("ignore:resuming from"),  # the resumed call raises max_steps
]


@pytest.fixture(scope="module")
def magrpo(tmp_path_factory):
    """A MAGRPO run to step 1, resumed to step 2, and its page."""
    run = tmp_path_factory.mktemp("page") / "magrpo"
    magrpo_run(run, steps=1)
    magrpo_run(run, steps=2, resume=True)
    return run, write_report(run)


@pytest.fixture(scope="module")
def at_grpo(tmp_path_factory):
    run = tmp_path_factory.mktemp("page") / "at_grpo"
    at_grpo_run(run)
    return run, write_report(run)


def test_the_page_loads_offline_without_an_error_through_every_control(magrpo):
    _, page_path = magrpo
    with open_report(page_path) as (page, log):
        for mode in ("none", "window", "ema"):
            page.select_option("#smooth-mode", mode)
        page.fill("#smooth-amount", "90")
        page.uncheck("#show-band")
        page.select_option("#f-agent", "bob")
        page.select_option("#tree-step", "1")
        page.locator("#tree-view details summary").first.click()
        page.locator("figure.panel svg").first.hover()
        assert page.locator("figure.panel .readout").first.text_content().startswith("step ")
        assert log.requests == [] and log.errors == []


def test_the_curves_draw_every_series_with_its_points_evals_and_the_resume(magrpo):
    run, page_path = magrpo
    data = report_data(run)
    with open_report(page_path) as (page, log):
        series = page.locator("path.series")
        assert series.count() == sum(len(p["keys"]) for p in data["panels"])
        team = page.locator('figure[data-title="team reward"]')
        # training rows at steps 1 and 2; evaluations at 0, 1 and 2
        assert (
            team.locator('path.series[data-key="reward/mean"]').get_attribute("data-points") == "2"
        )
        assert (
            team.locator('path.series[data-key="eval/reward/mean"]').get_attribute("data-points")
            == "3"
        )
        assert team.locator("circle.eval-point").count() == 3
        assert team.locator('path.band[data-key="reward/mean"]').count() == 1  # +- reward/std
        # the resume from step 1 is marked on every panel
        assert page.locator('line.resume[data-step="1"]').count() == len(data["panels"])
        assert team.locator("text.x-tick").all_text_contents() == ["0", "1", "2"]
        line = team.locator('path.series[data-key="reward/mean"]')
        smoothed = line.get_attribute("d")
        page.select_option("#smooth-mode", "none")
        line = page.locator('figure[data-title="team reward"] path.series[data-key="reward/mean"]')
        assert line.get_attribute("d") != smoothed  # EMA(w=0.6) moved the second point
        assert log.errors == []


def test_the_sample_table_filters_by_agent_step_and_example(magrpo):
    run, page_path = magrpo
    rows = read_jsonl(run / "samples.jsonl")
    assert len(rows) == 2 * 2 * G  # 2 steps x 2 agents x G
    with open_report(page_path) as (page, log):
        visible = page.locator("#sample-table tbody tr")
        assert visible.count() == len(rows)
        page.select_option("#f-agent", "alice")
        assert visible.count() == 2 * G
        page.select_option("#f-step", "2")
        assert visible.count() == G
        assert set(page.locator("#sample-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.agent + '@' + r.dataset.step)")) == {"alice@2"}  # fmt: skip
        page.select_option("#f-agent", "all")
        assert visible.count() == 2 * G
        assert page.locator("#sample-count").text_content() == f"{2 * G} samples"
        example = str(rows[0]["example"])
        page.select_option("#f-step", "all")
        page.select_option("#f-example", example)
        assert visible.count() == sum(str(r["example"]) == example for r in rows)
        assert log.errors == []


def test_the_magrpo_tree_shows_the_g_joint_actions_with_their_rewards(magrpo):
    run, page_path = magrpo
    rows = [r for r in read_jsonl(run / "samples.jsonl") if r["step"] == 2]
    with open_report(page_path) as (page, log):
        page.select_option("#tree-step", "2")
        joints = page.locator('#tree-view .node[data-node="root"] > .joints > .joint')
        assert joints.count() == G
        for j in range(G):
            joint = joints.nth(j)
            jid = joint.get_attribute("data-joint")
            assert jid == str(j)
            shown = joint.locator("pre.reply-text").all_text_contents()
            logged = {r["agent"]: r["completion"] for r in rows if r["joint"] == [jid]}
            assert shown == [logged["alice"], logged["bob"]]
            team_r = float(joint.locator(".r-team").text_content())
            assert team_r == joint_reward(logged, {})  # quarter steps: shown exactly
        assert log.errors == []


def test_the_at_grpo_turns_show_k_candidates_and_the_one_that_continued(at_grpo):
    _, page_path = at_grpo
    with open_report(page_path) as (page, log):
        nodes = page.locator("#tree-view .turn-node")
        assert nodes.count() == 4  # 2 turns x 2 agents
        for i in range(nodes.count()):
            cands = nodes.nth(i).locator(".candidate")
            assert cands.count() == G
            rewards = []
            for k in range(G):
                text = cands.nth(k).locator("pre.reply-text").text_content()
                reward = float(cands.nth(k).locator(".r-reward").text_content())
                assert reward == turn_reward(text)
                rewards.append(reward)
            chosen = nodes.nth(i).locator(".candidate.continued")
            assert chosen.count() == 1  # greedy selection: the best candidate continued
            assert float(chosen.locator(".r-reward").text_content()) == max(rewards)
        assert log.errors == []


def test_before_and_after_shows_the_first_and_the_last_evaluation(magrpo):
    run, page_path = magrpo
    evals = read_jsonl(run / "eval_samples.jsonl")
    with open_report(page_path) as (page, log):
        assert page.locator("#eval-first-head").text_content() == "first eval (step 0)"
        assert page.locator("#eval-last-head").text_content() == "last eval (step 2)"
        rows = page.locator("tr.eval-row")
        assert rows.count() == 2 * 2  # 2 held-out examples x 2 agents
        first = rows.nth(0).locator("td.eval-cell pre").all_text_contents()
        by = {(r["step"], r["example"], r["agent"]): r["completion"] for r in evals}
        assert first == [by[(0, 0, "alice")], by[(2, 0, "alice")]]
        assert log.errors == []


def test_the_harness_sees_and_aborts_a_request_off_the_machine(tmp_path):
    """What the tests above assert absent is caught when present: a page that asks the
    network has its request recorded and aborted (the report's own page also forbids any by
    its Content-Security-Policy)."""
    page_path = tmp_path / "leaky.html"
    page_path.write_text('<img src="http://example.invalid/x.png"><script>bad()</script>')
    with open_report(page_path) as (page, log):
        assert log.requests == ["http://example.invalid/x.png"]
        assert any("bad is not defined" in e for e in log.errors)


def test_the_page_runs_its_own_script_and_nothing_else_inline(magrpo, tmp_path):
    """The CSP lists the hashes of the page's own script and style: the page draws with no
    violation, while a script, a ``<base>`` and a form added to the file are refused."""
    _, page_path = magrpo
    with open_report(page_path) as (page, log):
        assert page.locator("figure.panel").count() > 0  # the page's own script ran
        assert log.errors == [] and log.requests == []  # a violation is a console error
    text = page_path.read_text()
    head = '<base href="https://example.invalid/"><script>window.injected = 1;</script>'
    body = '<form action="https://example.invalid/send" method="post"></form>'
    text = text.replace("<title>", head + "<title>", 1).replace("</body>", body + "</body>", 1)
    tampered = tmp_path / "tampered.html"
    tampered.write_text(text)
    with open_report(tampered) as (page, log):
        assert page.evaluate("window.injected") is None
        assert page.evaluate("document.baseURI") == tampered.resolve().as_uri()
        with page.expect_console_message(lambda m: "form-action" in m.text):
            page.evaluate("document.querySelector('form').requestSubmit()")
        assert page.locator("figure.panel").count() > 0
        assert log.requests == []
        assert len(log.errors) == 3, log.errors
        assert all("Content Security Policy" in e for e in log.errors), log.errors
        for directive in ("script-src", "base-uri", "form-action"):
            assert any(directive in e for e in log.errors), (directive, log.errors)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    run = write_long_run(tmp_path_factory.mktemp("page") / "long", steps=100_000)
    return run, write_report(run)


def test_a_100000_step_run_draws_every_section(long_run):
    run, page_path = long_run
    data = report_data(run)
    with open_report(page_path) as (page, log):
        assert page.locator("figure.panel").count() == len(data["panels"])
        series = page.locator("path.series")
        assert series.count() == sum(len(p["keys"]) for p in data["panels"])
        points = [int(n) for n in series.evaluate_all("ps => ps.map(p => p.dataset.points)")]
        assert all(0 < n <= 1000 for n in points), points
        loss = page.locator('path.range[data-key="loss/alice"]')
        assert loss.count() == 1  # each point's run of steps, lowest to highest
        page.locator('figure[data-title="loss"] svg').hover()
        assert (
            page.locator('figure[data-title="loss"] .readout').text_content().startswith("steps ")
        )
        # samples: 200 of the 2000 logged steps, 4 rows each, 100 rows a page
        rows = page.locator("#sample-table tbody tr")
        assert rows.count() == 100
        assert page.locator("#sample-page").text_content() == "1–100 of 800"
        page.click("#sample-next")
        assert page.locator("#sample-page").text_content() == "101–200 of 800"
        assert rows.count() == 100
        page.select_option("#f-agent", "bob")
        assert page.locator("#sample-page").text_content() == "1–100 of 400"
        # the last logged step's tree; the first and the last of 101 evaluations
        assert page.locator("#tree-view .joint").count() == 2
        assert page.locator("tr.eval-row").count() == 2 * 2
        assert (
            page.locator("#eval-caption")
            .text_content()
            .startswith("101 evaluations, from step 0 to step 100000")
        )
        assert log.errors == [] and log.requests == []


def test_a_tree_whose_joint_ids_loop_is_drawn_once(tmp_path):
    """Joint ids that lead back to a node above (a malformed or hand-made samples.jsonl) draw
    each node once on a path, rather than recurse until the stack overflows."""
    run = tmp_path / "loop"
    write_rows(run / "metrics.jsonl", [{"step": 1, "reward/mean": 1.0}])
    row = {"step": 1, "example": 0, "slot": 0, "turn": 0, "completion": "x", "team_reward": 1.0}
    write_rows(
        run / "samples.jsonl",
        [
            {**row, "agent": agent, "node": node, "joint": joint}
            for agent in ("alice", "bob")
            for node, joint in (("root", ["0"]), ("0", ["0", "root"]))
        ],
    )
    with open_report(write_report(run)) as (page, log):
        assert page.locator('#tree-view .node[data-node="root"]').count() == 1
        assert page.locator('#tree-view .node[data-node="0"]').count() == 1
        assert log.errors == []
