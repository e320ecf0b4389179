"""The Llama decode case study's reference step (decode_baselines.HFStep, transformers' Llama with a StaticCache)
on a GPU: a step writes its keys and values at the position it is given however often it runs, eager or replayed
from a CUDA graph, and a step-by-step decode matches the model's own forward over the whole sequence.

transformers 5 keeps a write counter per cache layer that every update advances; without the step's rewind,
repeated steps of one position (warm-up, timing, graph replays) wrote past the cache's end (index_copy_'s device
assert). A small Llama (2 layers) with fresh random weights every run."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

pytestmark = pytest.mark.gpu

B, LMAX = 2, 8


def _model(seed: int):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16).eval()


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def _keys(step):
    from decode_baselines import cache_tensors
    return [k.clone() for k, _ in cache_tensors(step.cache)]


def test_repeated_steps_write_the_one_position_eager_and_replayed():
    import torch
    from decode_baselines import HFStep
    seed = _seed()
    model = _model(seed)
    step = HFStep(model, B, LMAX)
    tokens = torch.randint(0, 256, (B,), device="cuda")
    pos = LMAX - 1  # the last slot: one advance too many is out of bounds
    step.set(tokens, pos)
    step.step()
    step.fill_cache_random(seed=seed % 1000)
    before = _keys(step)
    first = step.step().float().clone()
    for _ in range(3 * LMAX):
        again = step.step().float()
    torch.cuda.synchronize()
    assert torch.equal(first, again), f"seed {seed}"
    after = _keys(step)
    for k0, k1 in zip(before, after):  # only slot pos changed
        assert torch.equal(k0[:, :, :pos], k1[:, :, :pos]), f"seed {seed}"
    step.capture()
    for _ in range(3 * LMAX):
        replayed = step.replay().float()
    torch.cuda.synchronize()
    assert torch.equal(replayed, first), f"seed {seed}"
    for k0, k1 in zip(before, _keys(step)):
        assert torch.equal(k0[:, :, :pos], k1[:, :, :pos]), f"seed {seed}"


def test_step_by_step_decode_matches_the_whole_sequence_forward():
    import torch
    from decode_baselines import HFStep
    seed = _seed()
    model = _model(seed)
    g = torch.Generator(device="cuda").manual_seed(seed)
    seq = torch.randint(0, 256, (B, LMAX), device="cuda", generator=g)
    with torch.no_grad():
        whole = model(input_ids=seq).logits.float()
    step = HFStep(model, B, LMAX)
    step.logits = torch.full((B, 256), float("nan"), device="cuda")
    for pos in range(LMAX):
        step.set(seq[:, pos], pos)
        got = step.step().float()
        step.step()  # a second run of the same position changes nothing
        err = (got - whole[:, pos]).abs().max().item()
        assert err <= 0.05 + 0.02 * whole[:, pos].abs().max().item(), f"seed {seed}, pos {pos}: {err}"
