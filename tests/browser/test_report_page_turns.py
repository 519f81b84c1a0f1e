"""The report page in headless Chromium draws turns on their own axis: the evaluation panel's
y ticks stay on the scores' scale (about 1), the turns panel's reach the turns (about 4)."""

from __future__ import annotations

import pytest
from helpers.report_files import write_rows

from teamrl.commands.report import write_report
from teamrl.commands.report_browser import missing, open_report

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))


def test_the_evaluation_panel_keeps_turns_off_the_rewards_axis(tmp_path):
    run = tmp_path / "run"
    write_rows(
        run / "metrics.jsonl",
        [{"step": 0, "eval/reward/mean": 0.2, "eval/turns/mean": 4.0}]
        + [
            {"step": s, "reward/mean": s / 10, "turns/mean": 4.0, "eval/reward/mean": 0.2 + s / 20,
             "eval/turns/mean": 4.0 - s / 10}
            for s in range(1, 6)
        ],
    )  # fmt: skip
    page_path = write_report(run)
    with open_report(page_path) as (page, log):
        evaluation = page.locator('figure[data-title="evaluation"]')
        turns = page.locator('figure[data-title="turns"]')
        assert evaluation.locator("path.series").count() == 1
        assert evaluation.locator('path.series[data-key="eval/turns/mean"]').count() == 0
        assert turns.locator('path.series[data-key="eval/turns/mean"]').count() == 1
        assert turns.locator('path.series[data-key="turns/mean"]').count() == 1

        def top_tick(figure) -> float:
            ticks = figure.locator("text.tick:not(.x-tick)").all_text_contents()
            return max(float(t) for t in ticks)

        assert top_tick(evaluation) < 1.0  # the scores' own scale: 0.2 to 0.45
        assert top_tick(turns) >= 3.5
        assert log.errors == [] and log.requests == []
