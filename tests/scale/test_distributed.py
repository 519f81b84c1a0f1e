"""The distributed pieces that need no Ray: the placement plan (``--dry-run``), the loss
shares of data-parallel ranks, and the one-line error when Ray is missing."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from helpers.runs import tiny_overrides

from teamrl.cli import main
from teamrl.config import ConfigError, load_config
from teamrl.scale.placement import format_plan, parse_cluster, placement_plan, simulate_nodes
from teamrl.update.losses import Denominators, LossSettings, policy_loss

SEVEN_B = [
    "model.name_or_path=Qwen/Qwen2.5-7B-Instruct",
    "team.policies=separate",
    "model.use_peft=true",
    "distributed.backend=ray",
    "distributed.num_workers_per_policy=8",
    "distributed.num_gpus_per_worker=1",
    "distributed.num_cpus_per_worker=4",
]


def test_plan_has_one_group_for_shared_and_lora_and_one_per_agent_for_separate():
    shared = placement_plan(load_config(None, tiny_overrides("shared")))
    assert [(g.name, g.policies, g.agents) for g in shared] == [
        ("shared", ("shared",), ("alice", "bob"))
    ]
    lora = placement_plan(load_config(None, tiny_overrides("lora")))
    assert [(g.name, g.policies) for g in lora] == [("lora", ("alice", "bob"))]
    extra = {"distributed.num_workers_per_policy": 3, "distributed.num_gpus_per_worker": 0.5}
    sep = placement_plan(load_config(None, tiny_overrides("separate", **extra)))
    assert [(g.name, g.policies, g.agents) for g in sep] == [
        ("alice", ("alice",), ("alice",)),
        ("bob", ("bob",), ("bob",)),
    ]
    assert sep[0].bundles == [{"CPU": 1.0, "GPU": 0.5}] * 3


def test_seven_b_two_agents_separate_on_two_nodes_of_eight_gpus():
    cfg = load_config(None, tiny_overrides("separate") + SEVEN_B)
    groups = placement_plan(cfg)
    # PACK puts each agent's 8 workers on its own node: alice on node 0, bob on node 1
    assert simulate_nodes(groups, parse_cluster("2x8")) == [[0] * 8, [1] * 8]
    # one node of 8 GPUs holds only one agent
    assert simulate_nodes(groups, parse_cluster("1x8")) is None
    text = format_plan(cfg, parse_cluster("2x8"))
    assert "group 'bob': model Qwen/Qwen2.5-7B-Instruct" in text
    assert "  worker 7: rank 7 of 8 -> node 1" in text
    assert "total: 2 group(s), 64 CPU(s), 16 GPU(s)" in text


def test_an_asynchronous_plan_counts_the_sampler_groups():
    """max_staleness > 0 on Ray: each learner group has a generation-only twin, which the plan
    prints and the cluster must hold too (the 7B pair then needs 4 nodes of 8 GPUs)."""
    cfg = load_config(None, tiny_overrides("separate") + SEVEN_B + ["algorithm.max_staleness=1"])
    text = format_plan(cfg, parse_cluster("2x8"))
    assert "group 'alice (sampler)': model Qwen/Qwen2.5-7B-Instruct" in text
    assert "total: 4 group(s), 128 CPU(s), 32 GPU(s)" in text
    assert "does NOT fit the cluster given (2 node(s)" in text
    assert "does NOT fit" not in format_plan(cfg, parse_cluster("4x8"))
    assert len(placement_plan(cfg)) == 2  # what ray_team builds for the learner


def test_dry_run_prints_the_plan_and_loads_nothing(capsys, monkeypatch):
    import teamrl.trainer

    def fail(*a, **k):
        raise AssertionError("--dry-run must not build a trainer")

    monkeypatch.setattr(teamrl.trainer, "Trainer", fail)
    assert main(["train", "teamrl/configs/quickstart.yaml", *SEVEN_B[1:], "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "distributed.backend=ray" in out and "8 worker(s) x 4 CPU, 1 GPU" in out
    assert main(["train", "teamrl/configs/quickstart.yaml", "--dry-run", "--cluster", "2y"]) == 2
    assert "--cluster: expected NODESxGPUS" in capsys.readouterr().err


def test_bad_worker_count_is_a_config_error():
    with pytest.raises(ConfigError, match="distributed.num_workers_per_policy: expected >= 1"):
        load_config(None, tiny_overrides("shared", **{"distributed.num_workers_per_policy": 0}))


def test_ray_backend_without_ray_is_a_one_line_error(monkeypatch):
    from teamrl.scale.group import require_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ConfigError) as err:
        require_ray()
    assert str(err.value) == "distributed.backend=ray needs Ray: pip install 'teamrl[ray]'"
    # a folder named ray on the path imports as an empty namespace package: not Ray either
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    with pytest.raises(ConfigError, match=r"pip install 'teamrl\[ray\]'"):
        require_ray()


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_rank_shares_of_a_chunk_add_up_to_the_one_process_loss(loss_type):
    # one minibatch of 5 rows in 2 chunks (3 + 2 rows); each chunk split over 2 ranks (rows
    # 0::2 and 1::2). The ranks' weighted losses and gradients must sum to one process's.
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(5, 4, generator=g).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0.0]])
    adv = torch.tensor([1.0, -0.5, 0.25, 2.0, -1.0])
    old = logp.detach() + 0.1 * torch.randn(5, 4, generator=g)
    settings = LossSettings(loss_type=loss_type, epsilon=0.2)
    kw = dict(max_completion_length=4, minibatch_size=5, step_tokens=float(mask.sum()))
    chunks = [[0, 1, 2], [3, 4]]

    def total(shares: bool) -> torch.Tensor:
        out = 0
        for rows in chunks:
            pieces = [rows[0::2], rows[1::2]] if shares else [rows]
            for p in pieces:
                whole = dict(chunk_tokens=float(mask[rows].sum()), chunk_rows=len(rows))
                d = Denominators(chunk_size=len(p), **kw, **whole)
                out = (
                    out
                    + policy_loss(logp[p], old[p], adv[p], mask[p], settings, denominators=d).loss
                )
        return out

    one = total(False)
    (g_one,) = torch.autograd.grad(one, logp)
    two = total(True)
    (g_two,) = torch.autograd.grad(two, logp)
    assert float(two.detach()) == pytest.approx(float(one.detach()), rel=1e-6)
    assert torch.allclose(g_two, g_one, atol=1e-7)
    assert abs(float(one.detach())) > 1e-3  # a loss that is not trivially zero


def qwen_7b_shape(tmp_path) -> str:
    """A folder holding only Qwen2.5-7B's published shape (config.json): what the preflight
    builds on the meta device, no weights."""
    from transformers import Qwen2Config

    folder = tmp_path / "qwen2.5-7b-shape"
    Qwen2Config(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
    ).save_pretrained(folder)
    return str(folder)


def test_the_per_worker_estimate_knows_sharding(tmp_path):
    from teamrl import preflight

    full_7b = [
        f"model.name_or_path={qwen_7b_shape(tmp_path)}",
        "team.policies=separate",
        "distributed.backend=ray",
        "distributed.num_workers_per_policy=8",
        "distributed.num_gpus_per_worker=1",
    ]
    plain = load_config(None, tiny_overrides("separate") + full_7b)
    sharded = load_config(
        None, tiny_overrides("separate") + full_7b + ["distributed.sharding=fsdp"]
    )
    models = {n: preflight.meta_model_of(plain, n) for n in preflight.model_names(plain)}
    params = sum(p.numel() for p in next(iter(models.values())).parameters())
    assert 7.5e9 < params < 7.7e9  # Qwen2.5-7B
    group = placement_plan(plain)[0]  # one agent's 8 workers
    one = preflight.worker_estimate(plain, models, 256, group)
    eight = preflight.worker_estimate(sharded, models, 256, group)
    # fp32 full fine-tune: 4 bytes of weights, 3 x 4 of gradient and AdamW moments per parameter
    assert (one.weights, one.optimizer, one.replica) == (4 * params, 12 * params, 0.0)
    assert (eight.weights, eight.optimizer) == (4 * params / 8, 12 * params / 8)
    assert eight.replica == 4 * params  # the full copy each worker samples from
    # an 80 GB GPU: 121 GB of state does not fit one worker; sharded over 8 it does
    with pytest.raises(ConfigError, match="set distributed.sharding=fsdp") as err:
        preflight.check_placement(
            load_config(
                None, tiny_overrides("separate") + full_7b + ["distributed.gpu_memory_gb=80"]
            ),
            models,
            256,
        )
    assert "\n" not in str(err.value) and "GiB" in str(err.value)
    ok = load_config(
        None,
        tiny_overrides("separate")
        + full_7b
        + ["distributed.sharding=fsdp", "distributed.gpu_memory_gb=80"],
    )
    lines = preflight.check_placement(ok, models, 256)
    assert lines[0].startswith("group 'alice': per worker ")


def test_the_dry_run_refuses_a_placement_that_cannot_fit_in_one_line(tmp_path, capsys):
    args = [
        f"model.name_or_path={qwen_7b_shape(tmp_path)}",
        "team.policies=separate",
        "distributed.backend=ray",
        "distributed.num_workers_per_policy=2",
        "distributed.num_gpus_per_worker=1",
        "distributed.gpu_memory_gb=80",
    ]
    assert main(["train", "teamrl/configs/quickstart.yaml", *args, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "distributed.gpu_memory_gb=80" in err
