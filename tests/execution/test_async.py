"""Asynchronous training (algorithm.max_staleness; teamrl/execution/asynchronous.py): at staleness 0
the generator thread reproduces the synchronous trainer exactly, and stops doing so when the
weights are not handed to it; the staleness bookkeeping on scripted schedules, by hand; a
killed asynchronous run resumes with no example lost or used twice."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from helpers.runs import kill_at_checkpoint, tiny_overrides, train_in_subprocess

from teamrl.config import ConfigError, dump_config, load_config
from teamrl.execution.asynchronous import AsyncExecution
from teamrl.execution.local import LocalExecution
from teamrl.execution.protocol import TrainingRollout
from teamrl.rollout.common import RolloutResult
from teamrl.run.data_stream import DataStream
from teamrl.tasks.registry import task_from_config
from teamrl.trainer import Trainer

AT_GRPO = {"algorithm.name": "at_grpo", "env.kwargs": "{sequential: true}"}


def async_factory(cfg, task, data, recipe):
    """The asynchronous machinery whatever max_staleness says (0 here: synchronous)."""
    return AsyncExecution(LocalExecution(cfg, TrainingRollout(recipe, task, cfg), data), cfg)


def run(tmp_path, name, steps=3, execution=None, **extra):
    cfg = load_config(None, tiny_overrides("lora", steps, **extra))
    tr = Trainer(cfg, run_dir=tmp_path / name, execution=execution)
    return tr, tr.train()


def weights(tr) -> dict:
    return {
        n: {k: v.clone() for k, v in p.state_dict().items()} for n, p in tr.team.policies.items()
    }


def same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[n][k], b[n][k]) for n in a for k in a[n])


@pytest.mark.parametrize("algorithm", [{}, AT_GRPO], ids=["magrpo", "at_grpo"])
def test_staleness_0_through_the_generator_equals_the_synchronous_trainer(tmp_path, algorithm):
    sync, h_sync = run(tmp_path, "sync", **algorithm)
    asyn, h_async = run(tmp_path, "async", execution=async_factory, **algorithm)
    assert [m["reward/mean"] for m in h_async] == [m["reward/mean"] for m in h_sync]
    assert [m["async/staleness"] for m in h_async] == [0.0, 0.0, 0.0]
    assert same(weights(asyn), weights(sync))


def test_the_generator_must_receive_the_weights(tmp_path, monkeypatch):
    """Skip the hand-over (the version moves, the weights do not): from step 2 on the generator
    samples from the initial weights, and the run is no longer the synchronous one."""
    sync, _ = run(tmp_path, "sync")

    def stale(self, version):
        with self._cond:
            self._version = version  # the bookkeeping moves on, the snapshot stays version 0
            self._cond.notify_all()

    monkeypatch.setattr(AsyncExecution, "weights_updated", stale)
    broken, _ = run(tmp_path, "broken", execution=async_factory)
    assert not same(weights(broken), weights(sync))


class Scripted:
    """A generator whose rollout for step k waits until the test releases it and records the
    version of the weights it sampled with (what the sampler held when it started). It stands
    where the execution's ``TrainingRollout`` stands: called on a team, naming role prompts."""

    role_prompts = None  # the config's system prompts alone

    def __init__(self):
        self.release: dict[int, threading.Event] = {}
        self.started: dict[int, threading.Event] = {}

    def event(self, table, k):
        return table.setdefault(k, threading.Event())

    def __call__(self, team, examples, step):
        self.event(self.started, step).set()
        assert self.event(self.release, step).wait(30), f"step {step} never released"
        return RolloutResult(samples=[], stats={"time/generate": 0.0})


def scripted_execution(staleness: int):
    cfg = load_config(None, tiny_overrides("lora", 6, **{"algorithm.max_staleness": staleness}))
    data = DataStream(task_from_config(cfg.env).train, cfg.seed, cfg.train.shuffle)
    script = Scripted()
    learner = LocalExecution(cfg, script, data)
    return AsyncExecution(learner, cfg), script


def started(script, k, timeout=0.3) -> bool:
    return script.event(script.started, k).wait(timeout)


def test_staleness_bookkeeping_on_a_scripted_schedule():
    # S = 1, a slow learner: the generator runs one batch ahead and then waits for the update
    ex, script = scripted_execution(1)
    script.event(script.release, 0).set()
    assert ex.next_batch(0).version == 0  # sampled by the initial weights
    assert started(script, 1)  # batch 1 may start at once: 1 - 0 <= S
    script.event(script.release, 1).set()
    assert not started(script, 2)  # batch 2 needs version >= 1: it waits for the learner
    ex.weights_updated(1)
    b1 = ex.next_batch(1)
    assert (b1.version, b1.stats["async/staleness"]) == (0, 1.0)
    assert started(script, 2, timeout=10)
    script.event(script.release, 2).set()
    ex.weights_updated(2)  # published while batch 2 is in flight: it finishes under version 1
    b2 = ex.next_batch(2)
    assert (b2.version, b2.stats["async/staleness"]) == (1, 1.0)
    ex.stop()

    # S = 0: every batch waits for the update before it: versions 0, 1, 2, staleness 0
    ex, script = scripted_execution(0)
    for k in range(3):
        script.event(script.release, k).set()
        b = ex.next_batch(k)
        assert (b.version, b.stats["async/staleness"]) == (k, 0.0)
        assert not started(script, k + 1)  # nothing runs ahead of the learner
        ex.weights_updated(k + 1)
    ex.stop()

    # S = 2, a learner that never publishes: batches 0, 1, 2 all sample version 0, then stop
    ex, script = scripted_execution(2)
    for k in range(3):
        script.event(script.release, k).set()
    assert [ex.next_batch(k).version for k in range(3)] == [0, 0, 0]
    assert not started(script, 3)  # 3 - 0 > S
    ex.stop()


def test_stop_puts_back_the_examples_drawn_ahead():
    ex, script = scripted_execution(2)
    for k in range(3):
        script.event(script.release, k).set()
    expected = DataStream(ex.data.examples, ex.data.seed, ex.data.shuffle)
    expected.load(ex.data.state())
    expected.next(1)  # batch 0's one example: all the learner takes
    ex.next_batch(0)
    assert started(script, 2, timeout=10)  # batches 1 and 2 drew theirs ahead
    assert ex.data.state() != expected.state()
    ex.stop()
    assert ex.data.state() == expected.state()


def test_an_asynchronous_run_logs_staleness_and_importance_weights(tmp_path):
    tr, history = run(tmp_path, "s1", steps=4, **{"algorithm.max_staleness": 1})
    staleness = [m["async/staleness"] for m in history]
    assert all(s in (0.0, 1.0) for s in staleness) and staleness[0] == 0.0
    for m in history:
        for name in tr.team.policies:
            assert 0 < m[f"is_weight/{name}"] < 10  # corrected against the stale sampler
        assert m["async/learner_wait_s"] >= 0 and m["async/generator_busy_s"] > 0


def test_a_killed_asynchronous_run_resumes_with_no_example_lost_or_used_twice(tmp_path):
    extra = {"algorithm.max_staleness": 1, "log.save_steps": 1, "log.save_total_limit": "null"}
    cfg = load_config(None, tiny_overrides("lora", 4, **extra))
    whole, _ = run(tmp_path, "whole", steps=4, **extra)
    cfg_path = tmp_path / "config.yaml"
    dump_config(cfg, cfg_path)
    killed = tmp_path / "killed"
    kill_at_checkpoint(train_in_subprocess(cfg_path, killed), killed, 2)
    assert not (killed / "checkpoints" / "step-4").exists()
    resumed = train_in_subprocess(cfg_path, killed, "--resume")
    assert resumed.wait(timeout=240) == 0, resumed.stderr.read()

    def positions(run_dir):  # the data stream's position after each step's batch
        root = run_dir / "checkpoints"
        return [json.loads((root / f"step-{k}" / "trainer_state.json").read_text())["data"]
                for k in range(1, 5)]  # fmt: skip

    want = positions(whole.run_dir)
    assert want == [{"epoch": 0, "index": k} for k in range(1, 5)]  # one example a step
    assert positions(killed) == want
    steps = [
        json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"generation.backend": "vllm"}, "generation.backend"),
        ({"algorithm.filter_groups": True, "algorithm.max_resample_rounds": 2}, "max_resample"),
        ({"algorithm.max_staleness": -1}, "algorithm.max_staleness"),
    ],
)
def test_bad_asynchronous_configs_are_one_line_errors(extra, field):
    extra = {"algorithm.max_staleness": 1, **extra}
    with pytest.raises(ConfigError, match=field) as err:
        load_config(None, tiny_overrides("shared", 1, **extra))
    assert "\n" not in str(err.value)
