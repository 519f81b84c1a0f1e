"""The library on a GPU. Every test here but the first is marked ``cuda`` and skipped (by
tests/conftest.py) where torch.cuda.is_available() is False, so ``make test`` on a GPU machine
runs them all and a CPU machine skips them in no time.

Covered on CUDA: generation in every policy mode (shared, lora, separate) through the trainer, a
MAGRPO and an AT-GRPO step, bf16 weights, the builtin sampler's fast path (static KV cache +
CUDA graphs, with and without LoRA rows) against the eager loop under greedy decoding, the
update's fused LoRA linears against PEFT in bf16, and checkpoint + resume.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers.runs import tiny_overrides

from teamrl.config import ConfigError, load_config
from teamrl.preflight import check_device
from teamrl.trainer import Trainer

CUDA = torch.cuda.is_available()


def test_a_cuda_device_that_is_not_there_is_a_one_line_error():
    """Runs everywhere: without CUDA, model.device=cuda; with it, an index past the last GPU."""
    if CUDA:
        count = torch.cuda.device_count()
        device = f"cuda:{count}"
        expected = f"model.device={device} but this machine has {count} CUDA device(s)"
    else:
        device = "cuda"
        expected = (
            "model.device=cuda but torch.cuda.is_available() is False "
            "(use model.device=auto or cpu)"
        )
    cfg = load_config(None, tiny_overrides(**{"model.device": device}))
    with pytest.raises(ConfigError) as err:
        check_device(cfg)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


def _trainer(tmp_path, policies="shared", steps=2, **extra) -> Trainer:
    extra = {"model.device": "cuda", **extra}
    return Trainer(load_config(None, tiny_overrides(policies, steps, **extra)), run_dir=tmp_path)


def _on_cuda(trainer: Trainer) -> None:
    for pol in trainer.team.policies.values():
        devices = {p.device.type for p in pol.model.parameters()}
        assert devices == {"cuda"}, (pol.name, devices)
        assert all(p.device.type == "cuda" for p in pol.parameters())  # what the optimizer steps


def _finite_step(metrics: dict, policies) -> None:
    for name in policies:
        for key in ("loss", "grad_norm", "entropy"):
            assert math.isfinite(metrics[f"{key}/{name}"]), (key, name, metrics)


@pytest.mark.cuda
@pytest.mark.parametrize("policies", ["shared", "lora", "separate"])
def test_magrpo_step_on_cuda_in_every_policy_mode(tmp_path, policies):
    tr = _trainer(tmp_path, policies)
    _on_cuda(tr)
    for engine in tr.team.engines():
        assert engine.backend.fast  # fast_decode=auto: the static-cache path on CUDA
    m = tr.train_step()
    assert m["completion_length/mean"] > 0 and math.isfinite(m["reward/mean"])
    _finite_step(m, tr.team.policies)
    assert m["tokens_per_second"] > 0
    _on_cuda(tr)


@pytest.mark.cuda
def test_at_grpo_step_on_cuda(tmp_path):
    tr = _trainer(
        tmp_path, "lora", **{"algorithm.name": "at_grpo", "env.kwargs": "{sequential: true}"}
    )
    _on_cuda(tr)
    m = tr.train_step()
    _finite_step(m, tr.team.policies)


@pytest.mark.cuda
@pytest.mark.parametrize("policies", ["shared", "lora"])
def test_bf16_on_cuda(tmp_path, policies):
    tr = _trainer(tmp_path, policies, **{"model.dtype": "bfloat16"})
    model = tr.team.engines()[0].model
    assert {p.dtype for n, p in model.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    m = tr.train_step()
    _finite_step(m, tr.team.policies)
    # The step kept the base weights in bf16 (no silent upcast by the optimizer).
    assert {p.dtype for n, p in model.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    # One fused AdamW kernel on CUDA, bf16 weights included.
    for pol in tr.team.policies.values():
        assert pol.optimizer.defaults["fused"] is True


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_fast_path_gives_the_eager_loops_greedy_tokens_on_cuda(name):
    from teamrl.generation import fast_decode
    from teamrl.generation.hf import generate
    from teamrl.generation.types import Request
    from teamrl.team.models import load_model

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on both sides (the default, made sure)
    model = load_model(name, device="cuda").eval()
    prompts = [[5, 9, 14, 3], [7, 21], [30, 2, 8, 11, 19, 4, 6]]  # different widths
    reqs = [
        Request(prompt_ids=p, n=n, temperature=0.0, max_new_tokens=b)
        for p, n, b in zip(prompts, (3, 1, 2), (12, 7, 12))
    ]
    assert fast_decode.supported(model, reqs)
    eager = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    # The default on CUDA: the step captured as a CUDA graph. Twice: the second call replays it.
    for _ in range(2):
        fast = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True)
        assert [[g.completion_ids for g in per] for per in fast] == [
            [g.completion_ids for g in per] for per in eager
        ]
    assert [len(g.completion_ids) for per in fast for g in per] == [12, 12, 12, 7, 12, 12]
    fast_decode.release(model)


@pytest.mark.cuda
def test_the_decode_step_replays_as_a_cuda_graph_without_compiling():
    """The default on CUDA: the eager decode step captured once per shape as a CUDA graph
    (nothing compiled) and replayed, here and in the next call, with the eager loop's sampled
    tokens and log-probs under one seed."""
    from teamrl.generation import decode_graph, fast_decode
    from teamrl.generation.hf import generate
    from teamrl.generation.types import Request
    from teamrl.team.models import load_model

    torch.backends.cuda.matmul.allow_tf32 = False
    model = load_model("tiny-llama", device="cuda").eval()
    reqs = [
        Request(prompt_ids=p, n=n, temperature=1.0, max_new_tokens=b)
        for p, n, b in (([5, 9, 14, 3], 3, 12), ([7, 21], 1, 7), ([30, 2, 8, 11, 19], 2, 12))
    ]
    torch.manual_seed(0)
    want = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
    for _ in range(2):
        torch.manual_seed(0)
        got = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True)
        assert [[g.completion_ids for g in per] for per in got] == [
            [g.completion_ids for g in per] for per in want
        ]
        for a, b in zip(got, want):
            for x, y in zip(a, b):
                torch.testing.assert_close(
                    torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0
                )
    stats = fast_decode.stats(model)
    assert stats["captures"] == 1 and stats["compile_s"] == 0 and stats["eager_calls"] == 0
    (entry,) = fast_decode._STATES[model].graphs.values()
    assert isinstance(entry.graph, decode_graph.CudaGraph) and entry.ready
    fast_decode.release(model)


@pytest.mark.cuda
def test_the_fast_paths_cuda_graphs_serve_lora_rows_and_follow_the_weights():
    """Rows with LoRA adapters replay the captured step too (they ran eagerly before), with the
    eager loop's greedy tokens, and an in-place change of an adapter reaches the replay."""
    from peft import LoraConfig, get_peft_model

    from teamrl.generation import fast_decode
    from teamrl.generation.hf import generate
    from teamrl.generation.types import Request
    from teamrl.team.models import load_model

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(load_model("tiny-llama", device="cuda"), lora, adapter_name="alice")
    model.add_adapter("bob", lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    model.eval()
    reqs = [
        Request(prompt_ids=[5, 9, 14, 3], n=2, temperature=0.0, max_new_tokens=10, adapter="alice"),
        Request(prompt_ids=[7, 21], n=2, temperature=0.0, max_new_tokens=10, adapter="bob"),
        Request(prompt_ids=[30, 2, 8], n=1, temperature=0.0, max_new_tokens=10, adapter=None),
    ]

    def tokens(gens):
        return [[g.completion_ids for g in per] for per in gens]

    for change in (False, False, True):  # capture, replay, replay after a weight change
        if change:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "lora_B.alice" in name:
                        p.mul_(-3.0)
        eager = generate(model, reqs, eos_ids=[0], pad_id=0, ignore_eos=True)
        fast = fast_decode.generate(model, reqs, [0], 0, ignore_eos=True)  # CUDA graphs
        assert tokens(fast) == tokens(eager), change
    fast_decode.release(model)


@pytest.mark.cuda
def test_fused_lora_linears_match_peft_on_cuda_in_bf16():
    """The update's fused LoRA linear on a bf16 model with PEFT's fp32 adapters, the branch in
    float32 (PEFT's recipe) or in bf16 (autocast): the same logits and adapter gradients as
    PEFT's forward, within bf16 rounding."""
    from peft import LoraConfig, get_peft_model

    from teamrl.team.models import load_model
    from teamrl.update.lora_linear import fused_lora

    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    base = load_model("tiny-llama", device="cuda").to(torch.bfloat16)
    model = get_peft_model(base, lora, adapter_name="alice")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    ids = torch.tensor([[5, 9, 14, 3, 8], [7, 21, 2, 2, 6]], device="cuda")

    def run():
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits
        torch.log_softmax(logits.float(), -1)[..., 7].mean().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logits.detach().float(), grads

    want_logits, want = run()
    # PEFT's recipe ('adapter') and bf16 autocast ('model', the default): both PEFT's function
    # within bf16 rounding, the adapters' gradients in their float32
    for setting in ("adapter", "model"):
        with fused_lora(model, setting) as patched:
            got_logits, got = run()
        assert patched == 2 * 3 and want and got.keys() == want.keys()
        torch.testing.assert_close(got_logits, want_logits, rtol=2e-2, atol=2e-2)
        for n in want:
            assert got[n].dtype == torch.float32
            assert float((got[n] - want[n]).abs().max()) <= 2e-2 * float(want[n].abs().max()), n


@pytest.mark.cuda
def test_checkpoint_and_resume_on_cuda(tmp_path):
    extra = {"log.save_steps": 2, "train.prompts_per_step": 2}
    first = _trainer(tmp_path / "a", "lora", steps=2, **extra)
    first.train()
    saved = {n: p.state_dict() for n, p in first.team.policies.items()}
    from teamrl.run import checkpoints

    ckpt = checkpoints.latest_checkpoint(first.run_dir)
    assert ckpt.name == "step-2"
    cuda_rng = torch.load(ckpt / "rng.pt", weights_only=False)["cuda"]
    assert cuda_rng  # the CUDA generators' states were saved

    resumed = _trainer(tmp_path / "a", "lora", steps=4, **extra)
    torch.cuda.manual_seed_all(12345)  # move the stream: resume must put it back
    resumed.load_checkpoint(ckpt)
    assert resumed.step == 2
    _on_cuda(resumed)
    for name, pol in resumed.team.policies.items():
        got = pol.state_dict()
        assert set(got) == set(saved[name])
        for k, v in saved[name].items():
            assert got[k].device.type == "cuda" and torch.equal(got[k], v), (name, k)
        for state in pol.optimizer.state.values():  # Adam moments restored onto the GPU
            moments = [t for t in state.values() if torch.is_tensor(t) and t.dim() > 0]
            assert moments and all(t.device.type == "cuda" for t in moments)
    assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), cuda_rng))

    rest = resumed.train(resume=True)
    assert [m["step"] for m in rest] == [3, 4]
    for m in rest:
        _finite_step(m, resumed.team.policies)


@pytest.mark.cuda
@pytest.mark.parametrize("policies", ["shared", "lora"])
def test_the_updates_micro_batch_loop_never_waits_for_the_device(tmp_path, policies):
    """Item 2 of the GPU path: inside the micro-batch loop the host only queues work. Every
    host tensor goes to the GPU as a non-blocking copy from pinned memory (a plain ``.to`` from
    pageable memory synchronises the stream), and the reads of the device are the NaN check per
    optimizer step and the metrics at the end, whatever the number of micro-batches."""
    import traceback

    from torch.utils._python_dispatch import TorchDispatchMode

    from teamrl.credit.advantages import compute_advantages
    from teamrl.update.policy import update_policy
    from teamrl.update.settings import update_settings

    class Watch(TorchDispatchMode):
        blocking_copies = syncs = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.__name__.split(".")[0]
            if name in ("_to_copy", "copy_") and not kwargs.get("non_blocking", False):
                src = args[1] if name == "copy_" else args[0]
                dst = kwargs.get("device") if name == "_to_copy" else args[0].device
                if (
                    src.device.type == "cpu"
                    and dst is not None
                    and torch.device(dst).type == "cuda"
                ):
                    Watch.blocking_copies += 1
            to_host = name == "_to_copy" and args[0].device.type == "cuda"
            to_host = to_host and torch.device(kwargs.get("device") or "cuda").type == "cpu"
            if to_host or name in ("_local_scalar_dense", "item", "is_nonzero", "equal"):
                # transformers' own mask checks (one per prompt forward) are the model's
                if not any("/transformers/" in f.filename for f in traceback.extract_stack()):
                    Watch.syncs += 1
            return func(*args, **kwargs)

    counts = []
    for micro in (2, 8):
        tr = _trainer(tmp_path / str(micro), policies, **{"train.micro_batch_size": micro})
        samples = tr.rollout(tr.data.next(tr.cfg.train.prompts_per_step)).samples
        a = tr.cfg.algorithm
        compute_advantages(samples, a.baseline, a.scale_rewards)
        pol = next(iter(tr.team.policies.values()))
        mine = [s for s in samples if s.policy == pol.name]
        settings = update_settings(tr.cfg, pol.agents)
        update_policy(pol, mine, settings, step=1, max_completion_length=8)  # warm: lazy inits
        Watch.blocking_copies = Watch.syncs = 0
        with Watch():
            update_policy(pol, mine, settings, step=2, max_completion_length=8)
        counts.append((Watch.blocking_copies, Watch.syncs))
    assert counts[0][0] == counts[1][0] == 0, counts
    # one optimizer step: its NaN check and the metrics' one read, however many micro-batches
    assert counts[0][1] == counts[1][1] <= 2, counts


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_rows_score_as_the_padded_ones_on_cuda(dtype, monkeypatch):
    """The packed update's scoring on CUDA (flash-attention's variable-length kernel in bf16
    where this torch has it, the stacked segments otherwise) against the padded path: the same
    log-probs and gradients up to the dtype's rounding."""
    import random

    from transformers import AutoModelForCausalLM

    import teamrl.update.packing as packing
    from teamrl.sample import Sample
    from teamrl.team.models import model_config
    from teamrl.update.losses import collate, score_tokens

    calls = []
    real = packing._varlen

    def spy():
        fn = real()
        if fn is None:
            return None
        return lambda *a, **k: calls.append(1) or fn(*a, **k)

    monkeypatch.setattr(packing, "_varlen", spy)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(model_config("tiny-qwen2")).to("cuda", dtype)
    model.train()
    rng = random.Random(0)
    rows = []
    for plen in (3, 7, 12):
        prompt = [rng.randrange(3, 60) for _ in range(plen)]
        for n in (1, 4, 9):
            comp = [rng.randrange(3, 60) for _ in range(n)]
            rows.append(
                Sample(
                    agent="a",
                    policy="a",
                    turn=0,
                    group=plen,
                    prompt_ids=prompt,
                    completion_ids=comp,
                    sampler_logprobs=[-1.0] * n,
                    advantage=1.0,
                )
            )
    out = []
    for packed in (False, True):
        model.zero_grad(set_to_none=True)
        batch = collate(rows, 0, packed=packed).to(torch.device("cuda"))
        with packing.packed_forward(model):
            logp = score_tokens(model, batch).logp
            logp.sum().backward()
        grads = [p.grad.float().clone() for p in model.parameters() if p.grad is not None]
        out.append((logp.float(), grads))
    (a, ga), (b, gb) = out
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    assert torch.allclose(a, b, rtol=0, atol=tol * a.abs().max().item())
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, rtol=0, atol=tol * x.abs().max().item() + 1e-8)
    if dtype == torch.bfloat16 and real() is not None:
        assert calls, "the variable-length kernel was not used on CUDA"
