"""The MoE case study (case_studies/moe_four_owners): four teams' components, linked by pipelink and
classically. CPU: contracts, builds, links and the link-time side of the modified-geometry test.
GPU: the fused kernels against the torch reference."""
import os
import sys
from pathlib import Path

import pytest

from pipelink.cli import main

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "moe_four_owners"
sys.path.insert(0, str(CASE))

import builds  # noqa: E402
import variants  # noqa: E402


def _contracts(tmp_path, change=None) -> list[str]:
    out = []
    for team in builds.TEAMS:
        path = tmp_path / f"{team.folder}.json"
        path.write_bytes(builds.contract_with(team, change))
        out.append(str(path))
    return out


def test_the_four_contracts_check_together(tmp_path, capsys):
    assert main(["check", "--set", *_contracts(tmp_path)]) == 0
    assert "4 components" in capsys.readouterr().out


@pytest.mark.parametrize("variant", variants.VARIANTS, ids=lambda v: v.name)
def test_each_variant_propagates_or_is_refused_at_link_time(variant, tmp_path, capsys):
    """Five changes propagate through the contracts; the 128-row expert tile cannot fit (PL042)."""
    code = main(["check", "--set", *_contracts(tmp_path, variant.change)])
    if variant.name == "expert-tile-rows-128":
        assert code == 1 and "PL042" in capsys.readouterr().err
    else:
        assert code == 0, capsys.readouterr().err


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe")
    return builds.build_all(out), out


def test_both_builds_link(baseline):
    base, _ = baseline
    linked = builds.link_pipelink(base.pipelink_objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    m = linked.manifest
    assert m.dispatch == "dynamic" and list(m.tasks) == ["moe_router", "moe_dispatch", "moe_expert", "moe_combine"]
    assert "moe_expert waits i->i for tile_rows[i] (read on the device)" in linked.link_map
    assert m.resources.registers <= 128 and m.resources.frame_bytes == 0
    from pipelink.formats.cubin import read_cubin
    kernels = read_cubin(builds.link_classic(base.classic_objects))
    assert set(kernels) == {"moe_classic_fused", "moe_classic_router", "moe_classic_dispatch", "moe_classic_expert",
                            "moe_classic_combine"}


def test_a_variant_rebuilds_only_its_team(baseline):
    base, out = baseline
    change = variants.VARIANTS[0].change  # the expert team's tile rows
    b = builds.build_all(out / "variant", change, base)
    rebuilt = [o for o in b.pipelink_objects if o not in base.pipelink_objects]
    assert [o.name for o in rebuilt] == ["moe_expert.o"]
    linked = builds.link_pipelink(b.pipelink_objects)
    assert linked.ok and linked.manifest.geometry["EXPERT_TILE_M"] == 64
    assert "consumed by moe_dispatch" in linked.link_map  # the dispatch pads to the new tile


@pytest.mark.gpu
@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 1000), ("qwen3-30b-a3b", 16), ("qwen3-30b-a3b", 300)])
def test_fused_kernels_match_torch(baseline, shape, T):
    import torch
    import launchers
    import layer
    base, _ = baseline
    impls = [launchers.PipelinkLayer.from_link(builds.link_pipelink(base.pipelink_objects)),
             launchers.ClassicFused(builds.link_classic(base.classic_objects))]
    s = layer.SHAPES[shape]
    seed = int.from_bytes(os.urandom(2), "little")
    weights, x = layer.make_weights(s, seed), layer.make_tokens(s, T, seed + 1)
    for impl in impls:
        for _ in range(2):  # twice: no reset between pipelink launches
            buffers = layer.poisoned_buffers(impl.layout(s, T))
            impl.run(s, x, weights, buffers)
            torch.cuda.synchronize()
            v = layer.judge(s, x, weights, buffers)
            assert v.ok, (type(impl).__name__, v)
