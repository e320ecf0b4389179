"""The token embedding (case_studies/llama32_1b_decode/embedding: embed) on a GPU against torch indexing.

Fresh random tables and tokens every run (the seed is in the failure message), the output poisoned with NaN
so an unwritten element fails, batches 1, 3, 8 and 11, ragged widths (H not a multiple of the 2048 columns
of a task), tokens outside [0, V) (a row of zeros), every launch twice. The copy is exact: bit for bit."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

pytestmark = pytest.mark.gpu


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="module")
def embed(tmp_path_factory):
    objects = decode_parts.build_embedding(tmp_path_factory.mktemp("embedding"))
    linked = decode_parts.link_alone(objects["embed"])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    kernel = linked.kernel()
    yield kernel
    kernel.unload()


@pytest.mark.parametrize("B", [1, 3, 8, 11])
@pytest.mark.parametrize("V,H", [(decode_parts.VOCAB, decode_parts.HIDDEN), (1001, 2056), (5, 8), (300, 4104)],
                         ids=lambda v: str(v))
def test_embed(embed, B, V, H):
    import torch
    seed = fresh_seed()
    g = torch.Generator(device="cuda").manual_seed(seed)
    table = torch.randn(V, H, generator=g, device="cuda").to(torch.bfloat16)
    token = torch.randint(0, V, (B,), generator=g, device="cuda", dtype=torch.int32)
    if B >= 3:  # outside the vocabulary: a row of zeros
        token[0], token[1] = -1, V
    if B >= 8:
        token[2], token[3] = 2 ** 31 - 1, V - 1
    valid = (token >= 0) & (token < V)
    ref = torch.zeros(B, H, dtype=torch.bfloat16, device="cuda")
    ref[valid] = table[token[valid].long()]
    for launch in range(2):
        x = torch.full((B, H), float("nan"), dtype=torch.bfloat16, device="cuda")
        embed.launch(table=table, token=token, x=x, B=B, V=V, H=H)
        torch.cuda.synchronize()
        what = f"embed B={B} V={V} H={H} seed={seed} launch {launch} tokens {token.tolist()}"
        assert not torch.isnan(x.double()).any(), f"{what}: {int(torch.isnan(x.double()).sum())} elements unwritten"
        bad = x.view(torch.int16) != ref.view(torch.int16)
        assert not bad.any(), f"{what}: {int(bad.sum())} elements differ from table[token]"
