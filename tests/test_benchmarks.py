"""The interleaved benchmark's scheduler, statistics and worker protocol (no timing asserted)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import rounds  # noqa: E402


class Fake:
    """A contender whose step 'takes' the next of its scripted times; calls go to a shared log."""

    def __init__(self, name: str, times: list[float], log: list[str]):
        self.name, self.times, self.log = name, list(times), log

    def step(self) -> dict[str, float]:
        self.log.append(self.name)
        s = self.times.pop(0)
        return {"step_s": s, "generate_s": 0.75 * s, "update_s": 0.25 * s}


def test_rounds_rotate_the_order_after_an_untimed_warmup():
    log: list[str] = []
    fakes = {n: Fake(n, [1.0] * 4, log) for n in "ABC"}
    res = rounds.run_rounds(fakes, rounds=3, warmup=1, order="rotate")
    assert log == list("ABCABCBCACAB")
    assert res["orders"] == [list("ABC"), list("BCA"), list("CAB")]
    assert {n: len(v) for n, v in res["steps"].items()} == {"A": 3, "B": 3, "C": 3}


class Dying(Fake):
    """A worker killed (e.g. for memory) at its ``k``-th step."""

    def __init__(self, name, times, log, k):
        super().__init__(name, times, log)
        self.k = k

    def step(self):
        self.k -= 1
        if self.k == 0:
            raise RuntimeError(
                f"{self.name}: worker exited (1); last log lines:\nloading...\n"
                "torch.OutOfMemoryError: CUDA out of memory."
            )
        return super().step()


def test_a_worker_that_dies_is_dropped_with_its_reason_and_the_rounds_go_on():
    log: list[str] = []
    fakes = {"A": Fake("A", [1.0] * 4, log), "B": Dying("B", [1.0] * 4, log, k=3)}
    fakes["C"] = Fake("C", [2.0] * 4, log)
    res = rounds.run_rounds(fakes, rounds=3, warmup=1, order="rotate")
    # The reason names the exception the worker died of (its log's last line), not only "exited".
    why = "B: worker exited (1); last log lines: ... torch.OutOfMemoryError: CUDA out of memory."
    assert res["dropped"] == {"B": why}
    assert set(res["steps"]) == {"A", "C"}  # B's partial series is not reported
    assert {n: len(v) for n, v in res["steps"].items()} == {"A": 3, "C": 3}
    assert res["orders"] == [["A", "C"], ["C", "A"], ["A", "C"]]  # B died in round 2 (B C A)
    assert rounds.report(res["steps"], reference="C")["A"]["ratio_vs_reference"] == 2.0


def test_a_budget_stops_before_a_round_and_every_round_is_handed_over_as_it_ends():
    log: list[str] = []
    fakes = {n: Fake(n, [1.0] * 6, log) for n in "AB"}
    partials = []
    res = rounds.run_rounds(
        fakes,
        rounds=5,
        warmup=1,
        order="fixed",
        keep_going=lambda r: r < 2,  # the budget allows two timed rounds
        on_round_end=partials.append,
    )
    assert log == list("ABABAB")  # warm-up, then 2 rounds; the third never starts
    assert res["orders"] == [["A", "B"], ["A", "B"]]
    assert [{n: len(v) for n, v in p["steps"].items()} for p in partials] == [
        {"A": 1, "B": 1},
        {"A": 2, "B": 2},
    ]
    assert partials[-1] == res


def test_fixed_order_and_bad_order():
    log: list[str] = []
    rounds.run_rounds({n: Fake(n, [1.0] * 2, log) for n in "AB"}, rounds=2, warmup=0, order="fixed")
    assert log == list("ABAB")
    with pytest.raises(ValueError, match="--order"):
        rounds.round_order(["A"], 0, "random")


def test_quartiles_interpolate_between_order_statistics():
    assert rounds.quartiles([5, 1, 4, 2, 3]) == (2, 3, 4)
    # sorted 1 2 3 4: Q1 at position 0.75 -> 1.75, median at 1.5 -> 2.5, Q3 at 2.25 -> 3.25
    assert rounds.quartiles([4.0, 1.0, 3.0, 2.0]) == (1.75, 2.5, 3.25)
    assert rounds.summarize([7.0]) == {
        "median": 7.0,
        "min": 7.0,
        "max": 7.0,
        "q1": 7.0,
        "q3": 7.0,
        "iqr": 0.0,
        "n": 1,
    }


def test_report_gives_spread_split_and_the_median_of_per_round_ratios():
    log: list[str] = []
    # Round 4 is disturbed for both (30 s and 10 s): the per-round ratio stays sane there.
    ref = Fake("comlrl", [99, 10, 12, 8, 30, 10], log)
    team = Fake("lora", [99, 5, 4, 4, 10, 5], log)
    res = rounds.run_rounds({"comlrl": ref, "lora": team}, rounds=5, warmup=1)
    rep = rounds.report(res["steps"], reference="comlrl")
    assert rep["lora"]["ratios"] == [2.0, 3.0, 2.0, 3.0, 2.0]
    assert rep["lora"]["ratio_vs_reference"] == 2.0
    # lora sorted 4 4 5 5 10: Q1 = x1 = 4, median 5, Q3 = x3 = 5
    assert rep["lora"]["step_s"] == {
        "median": 5,
        "min": 4,
        "max": 10,
        "q1": 4,
        "q3": 5,
        "iqr": 1,
        "n": 5,
    }
    # comlrl sorted 8 10 10 12 30
    s = rep["comlrl"]["step_s"]
    assert (s["median"], s["q1"], s["q3"], s["min"], s["max"]) == (10, 10, 12, 8, 30)
    assert "ratios" not in rep["comlrl"]
    assert rep["lora"]["generate_s"]["median"] == 3.75 and rep["lora"]["update_s"]["median"] == 1.25
    with pytest.raises(ValueError, match="rounds differ"):
        rounds.per_round_ratios([1.0, 2.0], [1.0])


def test_worker_process_speaks_the_protocol_despite_stray_prints(tmp_path):
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(bench)!r})
        import rounds
        channel = rounds.protocol_stdout()
        print("a library chatting on stdout")
        rounds.send(channel, {{"ready": True}})
        n = 0
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            n += 1
            print("more chatter")
            rounds.send(channel, {{"step_s": float(n), "generate_s": 0.0, "update_s": 0.0}})
        rounds.send(channel, {{"peak_rss_gib": 0.5}})
    """)
    )
    w = rounds.WorkerProcess("fake", [sys.executable, str(script)], tmp_path / "fake.log")
    assert w.ready == {"ready": True}
    assert [w.step()["step_s"] for _ in range(3)] == [1.0, 2.0, 3.0]
    assert w.close() == {"peak_rss_gib": 0.5}
    assert "a library chatting" in (tmp_path / "fake.log").read_text()


def test_a_worker_that_dies_while_starting_names_itself_and_shows_its_log(tmp_path):
    cmd = [sys.executable, "-c", "import sys; sys.stderr.write('boom: no vllm\\n'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match=r"(?s)vllm-fake: worker exited \(3\).*boom: no vllm"):
        rounds.WorkerProcess("vllm-fake", cmd, tmp_path / "w.log")


def report_fields(**extra) -> dict:
    """What every benchmark report's ``render`` reads besides its own rows."""
    return {
        "machine": {"cpu": "cpu", "cores": 2, "torch": "t"},
        "args": {"model": "m", "num_generations": 4, "new_tokens": 8, "rounds": 3},
        "argv": [],
        "date": "d",
        "load_start": 0.0,
        "load_end": 0.0,
        **extra,
    }


def test_roofline_floors_by_hand():
    from roofline import floors

    work = {"params": 100, "models": 2, "prompt_tokens": 10}
    # 2 agents x G 2 x 5 tokens = 20 generated; decode reads 2 models x 400 B x 5 steps = 4000 B
    # against 2 x 100 x 20 = 4000 FLOPs: both 4e-6 s at 1 GB/s and 1 GFLOP/s
    lora = floors(work, "lora", new_tokens=5, g=2, bw=1.0, fl=1.0)
    assert lora["generate_s"] == pytest.approx(4e-6)
    # T = 20 completion + 2 prompts x 10 = 40 tokens; LoRA 4 P T, full fine-tune 6 P T
    assert lora["update_s"] == pytest.approx(4 * 100 * 40 / 1e9)
    assert floors(work, "shared", 5, 2, 1.0, 1.0)["update_s"] == pytest.approx(6 * 100 * 40 / 1e9)


def test_roofline_report_gives_each_median_with_its_spread():
    from roofline import render

    spread = {"median": 2.0, "min": 1.5, "max": 3.25}
    row = {
        "spread": {"generate_s": spread, "update_s": {"median": 4.0, "min": 4.0, "max": 4.5}},
        "floor": {"generate_s": 0.5, "update_s": 2.0},
        "ratio": {"generate_s": 4.0, "update_s": 2.0},
    }
    hardware = {"bandwidth_gbs": [1.0, 2.0], "matmul_gflops": [3.0]}
    result = report_fields(hardware=hardware, modes={"lora": row})
    md = render(result)
    assert "| lora | 2.00 [1.50, 3.25] (0.50, 4.0x) | 4.00 [4.00, 4.50] (2.00, 2.0x) |" in md
    assert "bandwidth 2.0 GB/s" in md and "3 interleaved rounds: median [min, max]" in md
    assert "Compiling" not in md  # eager sampling: no compile line
    compiled = report_fields(hardware=hardware, modes={"lora": {**row, "compile_s": 12.25}})
    assert "Compiling the decode steps (in the warm-up, not in the table): lora 12.2 s" in render(
        compiled
    )
    profile = {
        "wall_s": 3.5,
        "operators_s": 3.0,
        "outside_s": 0.5,
        "by_class": {"matmul": 2.0, "elementwise": 1.0},
        "calls_per_decode_step": 812.4,
    }
    profiled = render(report_fields(hardware=hardware, modes={"lora": {**row, "profile": profile}}))
    assert "| mode | profiled s | outside operators | elementwise | matmul |" in profiled
    assert "| lora | 3.50 | 0.50 | 1.00 | 2.00 | 812 |" in profiled
    assert "profiled" not in md


def test_roofline_ab_compares_each_mode_round_by_round():
    from roofline import ab_lines

    def steps(*gen):
        return [{"generate_s": g, "update_s": 1.0} for g in gen]

    # B's generate medians 2 against A's 4 (0.50); B faster in rounds 1 and 3, not round 2
    timings = {
        "shared": steps(4.0, 1.0, 5.0),
        "shared generation.fast_decode=on": steps(2.0, 3.0, 1.0),
    }
    args = {"against": ["generation.fast_decode=on"]}
    lines = ab_lines({"args": args, "timings": timings})
    assert "| shared | 0.50 | 2 of 3 | 1.00 | 0 of 3 |" in lines
    assert not any(line.startswith("| lora") for line in lines)  # no lora contenders here
    assert ab_lines({"args": {"against": []}, "timings": timings}) == []


def test_update_profile_classes_operators():
    from op_classes import op_class

    cases = {
        "aten::mm": "matmul",
        "aten::addmm": "matmul",
        "mkldnn::_linear_pointwise": "matmul",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
        "aten::add_": "elementwise",
        "aten::silu_backward": "elementwise",
        "aten::_log_softmax": "elementwise",
        "aten::copy_": "memory",
        "aten::index_select": "memory",
        "aten::t": "memory",
        "aten::_fused_adamw_": "optimizer",
        "MmBackward0": "matmul",
        "aten::multinomial": "other",
        "aten::tril": "other",  # a prefix of no class ("t" matches only aten::t itself)
    }
    assert {k: op_class(k) for k in cases} == cases


def test_update_profile_report_by_hand():
    from update_profile import CLASSES, render

    classes = dict.fromkeys(CLASSES, 0.0)
    classes.update(matmul=2.0, elementwise=1.0)
    row = {
        "tokens": 100,
        "floor_s": 1.0,
        "spread": {"median": 4.0, "min": 3.5, "max": 5.0},
        "profile": {
            "wall_s": 4.0,
            "classes_s": classes,
            "outside_ops_s": 1.0,
            "top_ops": [{"op": "aten::mm", "self_s": 2.0}],
        },
    }
    result = report_fields(matmul_gflops=[3.0, 4.0], modes={"lora": row})
    md = render(result)
    # floor 1.0 s: 4.0x; matmul 2.0 s of 4.0 profiled (50 %), efficiency floor / matmul = 0.50
    assert "| lora | 100 | 4.00 [3.50, 5.00] | 1.00 (4.0x) | 4.00 | 2.00 (50 %) |" in md
    assert "| 1.00 | 0.50 |" in md and "matmul 4.0 GFLOP/s" in md
    assert "`aten::mm` 2.00" in md


def test_update_gap_times_both_updates_on_the_same_rows(tmp_path):
    """benchmarks/update_gap.py at tiny size on the CPU: teamrl's update and the raw loop's run
    on one rollout's rows (2 prompts x 2 agents x G = 2), every round timed, both profiled."""
    import json

    import update_gap

    out = tmp_path / "gap"
    argv = ["--model", "tiny-llama", "--rounds", "2", "--prompt-tokens", "8", "--new-tokens", "4",
            "--num-generations", "2", "--prompts-per-step", "2", "--micro-batch-size", "3",
            "--out", str(out)]  # fmt: skip
    assert update_gap.main(argv) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["rows"] == 8
    assert {k: len(v) for k, v in res["times_s"].items()} == {"teamrl": 2, "raw": 2}
    for prof in res["profiles"].values():
        assert prof["wall_s"] > 0 and prof["top"] and prof["ops"] > 0
    assert "teamrl / raw:" in out.with_suffix(".md").read_text()


def test_a_step_contender_with_overrides_runs_with_them_and_a_bad_one_is_one_line(tmp_path):
    """magrpo_step's ``KIND@KEY=VALUE`` contenders: an A/B of a setting in the same rounds."""
    import argparse

    import magrpo_step

    args = argparse.Namespace(
        model="tiny-llama", device="cpu", dtype="float32", new_tokens=2, num_generations=2,
        prompts_per_step=1, micro_batch_size=0, prompt_tokens=0,
    )  # fmt: skip
    extra = ["generation.fast_decode=off", "train.learning_rate=0.5"]
    b = magrpo_step.TeamrlStep(args, ["hi there"], "lora", None, extra=extra).trainer.cfg
    a = magrpo_step.TeamrlStep(args, ["hi there"], "lora", None).trainer.cfg
    assert (a.generation.fast_decode, a.train.learning_rate) == ("auto", 1e-6)
    # The contender's own overrides come last, so they win over the benchmark's.
    assert (b.generation.fast_decode, b.train.learning_rate) == ("off", 0.5)
    assert b.team.policies == a.team.policies == "lora"

    for contenders, why in [
        (
            "lora,raw@train.learning_rate=1",
            "'raw@train.learning_rate=1': overrides apply to teamrl",
        ),
        ("lora@fast", "'lora@fast': each override after '@' is KEY=VALUE"),
        ("lorax@a=b", "unknown 'lorax'; choose from raw, lora"),
        ("lora,raw#HEAD", "'raw#HEAD': #REV applies to teamrl contenders only"),
        ("lora#no-such-rev-x", "#no-such-rev-x: not a commit of"),
    ]:
        args.contenders = contenders
        with pytest.raises(SystemExit, match=why):
            magrpo_step.start_contenders(args, tmp_path)


def test_step_ab_lines_pair_each_override_contender_with_its_plain_kind_by_hand():
    import magrpo_step

    def steps(*pairs):
        return [{"step_s": g + u, "generate_s": g, "update_s": u} for g, u in pairs]

    result = {
        "steps": {
            "raw": steps((9, 9), (9, 9), (9, 9)),
            "teamrl lora": steps((4, 2), (6, 2), (5, 2)),
            # generate medians 4 against 5 (0.80), faster in rounds 1 and 3 (3 < 4, 4 < 5) but
            # not round 2 (7 > 6); update 3 against 2 (1.50), never faster; steps 7, 9, 7
            # against 6, 8, 7: medians 7 and 7 (1.00), never faster (a tie is not faster)
            "teamrl lora@generation.fast_decode=on": steps((3, 4), (7, 2), (4, 3)),
            "teamrl shared@x=1": steps((1, 1), (1, 1), (1, 1)),  # no plain shared: no line
        }
    }
    lines = magrpo_step.ab_markdown(result)
    rows = [ln for ln in lines if ln.startswith("| lora@")]
    assert rows == [
        "| lora@generation.fast_decode=on | 1.00 | 0 of 3 | 0.80 | 2 of 3 | 1.50 | 0 of 3 |"
    ]
    assert not any("shared@" in ln for ln in lines)
    assert magrpo_step.ab_markdown({"steps": {"raw": steps((1, 1))}}) == []
    # A contender at an earlier revision pairs with its plain kind the same way.
    result["steps"]["teamrl lora#fe09340"] = steps((2, 2), (3, 2), (2, 2))
    rows = [ln for ln in magrpo_step.ab_markdown(result) if ln.startswith("| lora#")]
    assert rows == ["| lora#fe09340 | 0.57 | 3 of 3 | 0.40 | 3 of 3 | 1.00 | 0 of 3 |"]


def test_a_step_contender_at_a_revision_gets_that_revisions_package(tmp_path):
    """``lora#REV``: the worker imports teamrl as committed at REV, extracted beside the run
    (the first commit that touched teamrl/__init__.py is an old package, unlike the tree's)."""
    import subprocess

    import magrpo_step

    root = magrpo_step.ROOT
    if not (root / ".git").exists():
        pytest.skip("the checkout has no git history")
    first = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%H", "--reverse", "--", "teamrl/__init__.py"],
        capture_output=True, text=True, check=True,
    ).stdout.split()[0]  # fmt: skip
    dest = magrpo_step.checkout(first[:10], tmp_path)
    assert dest == tmp_path / first
    assert sorted(p.name for p in dest.iterdir()) == ["teamrl"]
    old = subprocess.run(
        ["git", "-C", str(root), "show", f"{first}:teamrl/__init__.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert (dest / "teamrl" / "__init__.py").read_text() == old
    # A second contender at the same revision reuses the extraction.
    assert magrpo_step.checkout(first, tmp_path) == dest
