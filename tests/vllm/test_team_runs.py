"""3-step MAGRPO and AT-GRPO runs through ``generation.backend=vllm`` on SmolLM2-135M.

What the runs must show, beyond "it ran":
- every engine's backend is the vLLM one, and the samples' sampler log-probs are exactly what
  vLLM returned (a recorder wraps ``VLLMBackend.generate``);
- the importance-sampling correction is on by default with this backend: ``is_weight/<policy>``
  and the mismatch ``logp_diff/<policy>`` are logged, finite, next to ``loss/<policy>``;
- the correction sees vLLM's processed log-probs as q: at T = 1, top_p = 1 the sampler's and
  the trainer's distributions are the same, so |log q - log pi_old| stays at fp32 noise on every
  step (after step 1 only because the engine was synced with the stepped weights); under
  top_p < 1, q is the renormalised nucleus, so log q >= log pi_old on every token and above it
  somewhere (vLLM's default raw log-probs would be the untempered softmax: neither);
- ``shared`` (full weights, synced in memory) runs the same way.
"""

from __future__ import annotations

import math

import torch

from teamrl.generation.vllm import VLLMBackend

TOL = 2e-3  # fp32 on both sides; measured per-token differences are ~1e-4


def _overrides(policies: str, algorithm: str, top_p: float = 1.0) -> list[str]:
    agent = "max_completion_length: 12"
    if top_p < 1:
        agent += f", temperature: 0.8, top_p: {top_p}"
    items = [
        "model.name_or_path=smollm2-135m",
        f"team.policies={policies}",
        "env.name=digits",
        f"team.agents=[{{name: alice, {agent}}}, {{name: bob, {agent}}}]",
        "train.max_steps=3",
        "train.learning_rate=0.01",
        "algorithm.num_generations=2",
        f"algorithm.name={algorithm}",
        "log.progress_bar=false",
        "generation.backend=vllm",
        "generation.vllm_max_model_length=1024",
        "generation.vllm_kv_cache_gb=0.5",
    ]
    if policies == "lora":
        items += ["model.lora_r=8", "model.lora_target_modules=[q_proj, v_proj]"]
    if algorithm == "at_grpo":
        items.append("env.kwargs={sequential: true}")
    return items


def _run(tmp_path, monkeypatch, overrides):
    """Train; return (trainer, history, what vLLM returned, the (old, q, mask) the IS saw,
    the weights_changed calls)."""
    import teamrl.update.policy as update
    from teamrl.config import load_config
    from teamrl.trainer import Trainer

    returned: list[list[float]] = []
    synced: list[str | None] = []
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    generate, mismatch = VLLMBackend.generate, update.mismatch_stats
    weights_changed = VLLMBackend.weights_changed

    def recording_generate(self, requests, ignore_eos=False):
        out = generate(self, requests, ignore_eos)
        returned.extend(list(g.logprobs) for gens in out for g in gens)
        return out

    def recording_mismatch(old, q, mask):
        seen.append((old.detach().clone(), q.detach().clone(), mask.detach().clone()))
        return mismatch(old, q, mask)

    def recording_sync(self, adapter):
        synced.append(adapter)
        return weights_changed(self, adapter)

    monkeypatch.setattr(VLLMBackend, "generate", recording_generate)
    monkeypatch.setattr(VLLMBackend, "weights_changed", recording_sync)
    monkeypatch.setattr(update, "mismatch_stats", recording_mismatch)
    trainer = Trainer(load_config(None, overrides), run_dir=tmp_path / "r")
    history = trainer.train()
    return trainer, history, returned, seen, synced


def _check_run(trainer, history, returned, seen, synced):
    assert all(isinstance(e.backend, VLLMBackend) for e in trainer.team.engines())
    assert len(history) == 3
    for h in history:
        for name in trainer.team.policies:
            for key in ("loss", "grad_norm", "logp_diff", "is_weight", "is_clipped_fraction"):
                assert f"{key}/{name}" in h, (key, name, sorted(h))
                assert math.isfinite(h[f"{key}/{name}"]), (key, name, h)
    # The q the IS correction saw, row by row, is a list vLLM returned (the recorder holds
    # every generation of every step; a sample is one of them, unpadded).
    assert seen, "update_policy never measured the sampler mismatch"
    rows = {tuple(round(x, 6) for x in r) for r in returned}
    for _, q, mask in seen:
        for qi, mi in zip(q, mask):
            n = int(mi.sum())
            assert tuple(round(float(x), 6) for x in qi[:n]) in rows
    # One sync per policy at engine start and one after each of its optimizer steps.
    adapters = [p.adapter for p in trainer.team.policies.values()]
    assert synced == adapters + adapters * 3, synced


def test_lora_magrpo_three_steps_engine_follows_the_adapters(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch, _overrides("lora", "magrpo"))
    _check_run(*run)
    trainer, history, _, seen, _ = run
    # T = 1, top_p = 1: q == pi_old up to numerics, at every step (the engine follows the
    # adapters the optimizer stepped at lr 0.01; a stale engine would drift from step 2 on).
    for old, q, mask in seen:
        assert float(((old - q).abs() * mask).max()) < TOL
    for h in history:
        for name in trainer.team.policies:
            assert h[f"logp_diff/{name}"] < TOL and abs(h[f"is_weight/{name}"] - 1) < TOL


def test_lora_at_grpo_three_steps_processed_logprobs_are_q(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch, _overrides("lora", "at_grpo", top_p=0.8))
    _check_run(*run)
    seen = run[3]
    gaps = torch.cat([(q - old)[mask.bool()] for old, q, mask in seen])
    assert float(gaps.min()) > -TOL  # log q >= log pi_old: q is the renormalised nucleus
    assert float(gaps.max()) > 1e-2  # and the truncation bites somewhere


def test_shared_full_weights_run_three_steps(tmp_path, monkeypatch):
    overrides = _overrides("shared", "magrpo") + ["train.learning_rate=0.0001"]
    run = _run(tmp_path, monkeypatch, overrides)
    _check_run(*run)
    trainer, _, _, seen, synced = run
    (pol,) = trainer.team.policies.values()
    assert pol.adapter is None  # full weights: synced in memory after every step
    for old, q, mask in seen:
        assert float(((old - q).abs() * mask).max()) < TOL
