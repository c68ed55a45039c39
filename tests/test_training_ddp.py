"""PyTorch DDP beside ours: the torch model is our model (same layout, same numbers), and DDP over
Gloo trained on the same weights and batches gives the same losses. Needs torch (CI installs it)."""

import numpy as np
import pytest
from tools import NO_TORCH, importable, need

from playground.cli.testing import run_scenario
from playground.transformer import BatchSampler, ModelConfig, ParamLayout, Transformer, lecture_bytes
from playground.transformer.init import init_params

CONFIG = ModelConfig(layers=2, d_model=16, heads=2, context=16, dtype="float64")


@pytest.fixture(scope="module")
def torch_model():
    need(importable("torch"), NO_TORCH)
    from playground.training import ddp_model

    return ddp_model


def test_the_torch_model_is_ours_parameter_for_parameter(torch_model):

    params = init_params(CONFIG, seed=5)
    model = torch_model.build(CONFIG, params)
    assert [name for name, _ in model.named_parameters()] == [s.name for s in ParamLayout.for_config(CONFIG)]
    assert np.array_equal(torch_model.flat_params(model), params)
    assert model.h[0].attn.c_attn.weight.shape == (16, 48)  # GPT-2's Conv1D: (in, out)


def test_the_torch_model_computes_our_loss_and_gradients(torch_model):
    """float64: logits within 1e-13 of ours, every gradient within 1e-11 of the largest."""
    import torch
    import torch.nn.functional as F

    params = init_params(CONFIG, seed=5)
    ours = Transformer(CONFIG, params.copy())
    inputs, targets = BatchSampler(lecture_bytes(), CONFIG.context, 4, seed=2).rank_batch(0)
    loss = ours.forward(inputs, targets)
    ours.backward()
    model = torch_model.build(CONFIG, params)
    logits = model(torch.from_numpy(inputs))
    theirs = F.cross_entropy(logits.reshape(-1, 256), torch.from_numpy(targets).reshape(-1))
    theirs.backward()
    expected = Transformer(CONFIG, params.copy()).logits(inputs)
    assert np.max(np.abs(logits.detach().numpy() - expected)) <= 1e-13 * np.max(np.abs(expected))
    assert theirs.item() == pytest.approx(loss, rel=1e-14)
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
    assert np.max(np.abs(grads - ours.grads)) <= 1e-11 * np.max(np.abs(ours.grads))


@pytest.mark.timeout(60)
def test_ddp_and_ours_lose_the_same_to_1e_9_over_50_steps(runs_dir, torch_model):
    """Measured: the largest relative gap over the 50 steps is about 1e-14."""
    sets = [
        "params.layers=2",
        "params.d_model=16",
        "params.heads=2",
        "params.context=16",
        "params.batch=4",
        "params.steps=50",
        "params.dtype=float64",
        "params.mode=[bucketed]",
        "params.bucket_cap_mb=0.01",
        "params.first_bucket_mb=0.002",
        "params.sample_bytes=0",
        "params.baseline=ddp",
    ]
    code, result, out, err = run_scenario("train", runs_dir, ranks=2, sets=sets, timeout_s=58)
    assert code == 0, out + err
    ddp = result["ddp"]
    assert len(ddp["loss_gaps"]) == 50 and max(ddp["loss_gaps"]) <= 1e-9
    ours = next(m for m in result["modes"] if m["mode"] == "bucketed")
    assert ddp["buckets"] == ours["buckets"]  # DDP's rebuilt buckets are ours, byte for byte
    table = result["tables"][-1]
    assert table["title"].startswith("ours (bucketed) against PyTorch DDP over Gloo")
    assert table["title"].endswith("each all-reducing its buckets in place")  # like against like
    assert [r["steps"] for r in table["rows"]] == ["0-9", "10-19", "20-29", "30-39", "40-49"]
    assert all(r["step_ddp_ms"] > 0 and 0 <= r["overlap_ddp_pct"] <= 100 for r in table["rows"])
    assert (runs_dir / "latest" / "ddp" / "rank-1.jsonl").exists()
