"""The MoE case study (case_studies/moe_four_owners): four teams' components, linked by pipelink and
classically. CPU: contracts, builds, links and the link-time side of the modified-geometry test.
GPU: the fused kernels against the torch reference."""
import os
import sys
from pathlib import Path

import pytest

from pipelink.authoring.conformance import spills_in_streaming_loops

from pipelink.cli import main

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "moe_four_owners"
sys.path.insert(0, str(CASE))

from casestudy import case_module  # noqa: E402

builds = case_module(CASE, 'builds')
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


def test_an_odd_dispatch_block_is_refused_for_the_combine(tmp_path, capsys):
    """The combine reads its two tokens' picks as one row of pair_tile, which the dispatch pads to whole
    DISPATCH_TOKENS blocks: an odd block would leave the last row short, so the link says so first."""
    code = main(["check", "--set", *_contracts(tmp_path, variants.Change("dispatch", "DISPATCH_TOKENS", 33))])
    err = capsys.readouterr().err
    assert code == 1 and "DISPATCH_TOKENS" in err and "moe_combine" in err, err


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    out = tmp_path_factory.mktemp("moe")
    return builds.build_all(out), out


def sass_of(linked) -> str:
    from pipelink import toolchain
    return toolchain.disassemble(linked.cubin)


def test_both_builds_link(baseline):
    base, _ = baseline
    linked = builds.link_pipelink(base.pipelink_objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    m = linked.manifest
    assert m.dispatch == "dynamic" and list(m.tasks) == ["moe_router", "moe_dispatch", "moe_expert", "moe_combine"]
    assert "moe_expert waits i->i for tile_rows[i] (read on the device)" in linked.link_map
    # the expert allows 255 registers and shared memory holds the kernel to one block an SM: no spill in
    # a loop that streams (a few bytes of frame at a task's start cost nothing)
    assert m.resources.registers <= 255 and m.resources.frame_bytes <= 16
    assert spills_in_streaming_loops(sass_of(linked)) == []
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
    assert linked.ok and linked.manifest.geometry["EXPERT_TILE_M"] == change.value
    assert "consumed by moe_dispatch" in linked.link_map  # the dispatch pads to the new tile


@pytest.fixture(scope="module")
def split_layer(baseline):
    base, out = baseline
    return builds.link_split(builds.build_split(out / "split", base))


def test_the_split_expert_links_in_place_of_the_expert(split_layer):
    """The expert team's split expert and its merge take moe_expert's place; the other three teams'
    objects are the baseline's, unchanged."""
    linked = split_layer
    assert linked.ok, [d.render() for d in linked.diagnostics]
    m = linked.manifest
    assert list(m.tasks) == ["moe_router", "moe_dispatch", "moe_expert_split", "moe_expert_merge", "moe_combine"]
    assert "shares[ceil_div(T * TOPK, 32) + E]: moe_expert_split notifies ij->i; moe_expert_merge waits i->i for splits" \
        in linked.link_map
    assert "done[ceil_div(T * TOPK, 32) + E]: moe_expert_merge notifies i->i; moe_combine waits" in linked.link_map
    names = [p.name for p in m.user_params]
    assert "splits" in names and "part" in names
    # h for a quarter of I: the launcher takes at least I / EXPERT_SHARE_MAX splits; two blocks an SM
    assert m.geometry["EXPERT_SHARE_MAX"] == 192
    assert "2 blocks of 128 threads" in linked.link_map
    # the split expert allows 255 registers: the kernel takes what two blocks an SM leave, and spills none
    # in a loop that streams
    assert m.resources.registers <= 255 and m.resources.frame_bytes <= 16
    assert spills_in_streaming_loops(sass_of(linked)) == []
    assert names.index("ys") == names.index("part") + 1  # one share writes ys itself


def test_the_four_objects_link_one_kernel_each_as_the_separate_control(baseline):
    """Each team's object alone (`standalone`: its waits are met by the launch order), with dependent launch;
    linked without `standalone`, a component that waits on another's events is refused (PL081)."""
    base, _ = baseline
    kernels = builds.link_separate(base.pipelink_objects)
    assert [k.manifest.kernel for k in kernels] == [f"{t.component}_alone" for t in builds.TEAMS]
    assert all(k.manifest.dependent_launch for k in kernels)
    # the router keeps its own chain (a token block's picking task after its slices), nobody else an event
    assert [k.manifest.workspace is not None for k in kernels] == [True, False, False, False]
    assert "wait_for" in kernels[0].glue and "routed" not in kernels[0].glue
    assert "pl::events" not in kernels[2].glue and "wait_for" not in kernels[2].glue
    from pipelink.core.pipeline import PipelineSpec
    from pipelink.linker.passes import LinkOptions, link
    alone = link([str(base.pipelink_objects[2])], LinkOptions(pipeline=PipelineSpec(name="expert_alone")))
    assert not alone.ok and "PL081" in [d.code for d in alone.diagnostics]


def test_expert_splits_fill_the_gpu_for_few_tokens_only():
    layer = case_module(CASE, 'layer')
    q, small = layer.SHAPES["qwen3-30b-a3b"], layer.SHAPES["small"]
    got = {T: layer.expert_splits(q, T) for T in layer.TOKEN_COUNTS}
    assert got == {16: 3, 128: 1, 1024: 2, 4096: 1}
    assert all(1 <= layer.expert_splits(s, T, sms=sms, blocks_per_sm=b) <= s.I // 64
               for s in (q, small) for T in (1, 7, 16, 300, 100000) for sms in (1, 132, 1000) for b in (1, 2, 4))
    assert layer.expert_splits(q, 1, sms=1000) == q.I // 64  # never more shares than 64-column blocks
    # a share no wider than what h holds: 768 / 192 = 4 shares at least, whatever T; at T=16 the 83 tiles'
    # 4 shares a tile take two waves over 264 CTAs, the second a quarter full: 6 shares take two shorter ones
    got = {T: layer.expert_splits(q, T, share_max=192, blocks_per_sm=2) for T in layer.TOKEN_COUNTS}
    assert got == {16: 6, 128: 4, 1024: 4, 4096: 4}
    assert layer.expert_splits(q, 4096, share_max=384) == 2 and layer.expert_splits(q, 4096, share_max=768) == 1
    # the tiles: at T=16 no expert gets more than 16 rows, so one tile for each touched expert
    assert layer.expected_tiles(q, 16, 64) == pytest.approx(q.E * (1 - (1 - q.TOPK / q.E) ** 16))
    assert layer.expected_tiles(q, 4096, 64) == pytest.approx(573.9, abs=0.1)  # 256 +- 15 rows: 4 or 5 tiles
    assert layer.expected_tiles(q, 0, 64) == 0 and layer.expected_tiles(small, 64, 32) > 0
    lay = layer.Layout(q, 16, dict(layer.AGREED_GEOMETRY), splits=4)
    assert lay.sizes()["part"] == 4 * lay.sizes()["ys"]
    assert "part" not in layer.Layout(q, 16, dict(layer.AGREED_GEOMETRY)).sizes()


def test_router_slices_spread_the_gate_reads_at_few_tokens_only():
    layer = case_module(CASE, 'layer')
    q = layer.SHAPES["qwen3-30b-a3b"]
    chunks = q.H // 64
    got = {T: layer.router_slices(T, 32, chunks) for T in layer.TOKEN_COUNTS}
    assert got == {16: 8, 128: 8, 1024: 3, 4096: 1}  # 1, 4, 32, 128 token blocks over 132 SMs
    assert layer.router_slices(16, 32, 3) == 3  # never more slices than K chunks
    for T in (1, 31, 33, 1024, 2100, 5000):
        for rt in (16, 32):
            for k in (1, 2, 32):
                for sms in (1, 8, 132):
                    s = layer.router_slices(T, rt, k, sms)
                    assert 1 <= s <= min(layer.ROUTER_SLICES_MAX, k)
                    # sliced, a block's slices and its picking task all run in the first wave
                    assert s == 1 or -(-T // rt) * (s + 1) <= sms
    lay = layer.Layout(q, 16, dict(layer.AGREED_GEOMETRY), slices=8)
    assert lay.sizes()["score_parts"] == 8 * 16 * q.E


@pytest.mark.gpu
@pytest.mark.parametrize("slices", [1, 2, 3, 8])
def test_every_router_slicing_routes_the_same(baseline, slices):
    """The router's picking task sums its slices' partial logits: any slicing (forced here, whatever the
    launcher would pick) routes like the fp32 reference, in the fused layer and in its separate kernels."""
    launchers = case_module(CASE, 'launchers')
    base, _ = baseline
    for impl in (launchers.PipelinkLayer.from_link(builds.link_pipelink(base.pipelink_objects)),
                 launchers.PipelinkSeparate.from_links(builds.link_separate(base.pipelink_objects))):
        impl.slices = lambda shape, T, n=slices: n
        _two_fresh_launches_are_correct(impl, "small", 77)


def _two_fresh_launches_are_correct(impl, shape, T):
    """Two launches in a row, no reset between them, each on fresh tokens into freshly poisoned buffers, each
    judged against the fp32 reference. Returns (shape, weights, seed) for more launches."""
    import torch
    layer = case_module(CASE, 'layer')
    s = layer.SHAPES[shape]
    seed = int.from_bytes(os.urandom(2), "little")
    weights = layer.make_weights(s, seed)
    for launch in range(2):
        x = layer.make_tokens(s, T, seed + 1 + launch)
        buffers = layer.poisoned_buffers(impl.layout(s, T))
        impl.run(s, x, weights, buffers)
        torch.cuda.synchronize()
        v = layer.judge(s, x, weights, buffers)
        assert v.ok, (launch, v)
    return s, weights, seed


@pytest.mark.gpu
@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 1000), ("qwen3-30b-a3b", 16), ("qwen3-30b-a3b", 300)])
def test_separate_pipelink_kernels_match_torch(baseline, shape, T):
    """The separate control: four kernels in stream order with dependent launch, twice without a reset."""
    launchers = case_module(CASE, 'launchers')
    base, _ = baseline
    _two_fresh_launches_are_correct(launchers.PipelinkSeparate.from_links(builds.link_separate(base.pipelink_objects)),
                                    shape, T)


@pytest.fixture(scope="module")
def hopper_layer(baseline):
    base, out = baseline
    return builds.link_hopper(builds.build_hopper(out / "hopper", base))


def test_the_hopper_expert_links_as_an_sm90a_kernel_of_unserialized_wgmma(hopper_layer):
    """The Hopper expert takes the split expert's place with 64-row tiles (dispatch and merge follow its
    EXPERT_TILE_M); the link is sm_90a, its wgmma run asynchronously (one wait per k-step, not one per
    instruction), and the kernel gets the expert's register cap since shared memory holds it to one block."""
    linked = hopper_layer
    assert linked.ok, [d.render() for d in linked.diagnostics]
    m = linked.manifest
    assert m.target == "sm_90a" and m.geometry["EXPERT_TILE_M"] == 64
    assert list(m.tasks) == ["moe_router", "moe_dispatch", "moe_expert_hopper", "moe_expert_merge", "moe_combine"]
    assert 192 < m.resources.registers <= 255 and m.resources.frame_bytes <= 16
    assert "1 block of 128 threads" in linked.link_map
    sass = sass_of(linked)
    assert spills_in_streaming_loops(sass) == []
    # 2 ring depths (a narrow share's ring takes h's free part) x 2 phases x 4 k16 slices, each [gate | up]
    # or two tiles of down rows as one B
    assert sass.count("HGMMA.64x128x16.F32.BF16") == 16
    # per ring depth and k-step loop one wait for the step before (one group in flight) and one at a block's
    # end: not serialized (that would be a wait per instruction); and one after the down loop
    assert sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x1") == 4 and sass.count("WARPGROUP.DEPBAR.LE gsb0, 0x0") == 6


def test_the_hopper_experts_loops_keep_their_length_in_the_layer(baseline):
    """The layer kernel has one register allocation: what the other components keep live must not make the
    expert recompute inside its k-steps (the combine's register-held loads once made its gate/up loop 20%
    longer than linked alone, and the layer 5% slower at T=4096). `link --loops` compares its loops with the
    same loops in a kernel of its own."""
    from pipelink.linker.loops import GROWTH_WARN
    from pipelink.linker.passes import LinkOptions, link
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.pipeline import load_pipeline
    base, out = baseline
    objects = builds.build_hopper(out / "hopper", base)
    spec = load_pipeline(str(builds.HOPPER_PIPELINE), DiagnosticSink())
    linked = link([str(o) for o in objects], LinkOptions(pipeline=spec), extra=("loops",))
    assert linked.ok, [d.render() for d in linked.diagnostics]
    section = linked.link_map[linked.link_map.index("## streaming loops"):]
    lines = [ln for ln in section.splitlines() if ln.startswith("  moe_expert_hopper: ") and "HGMMA" in ln]
    # gate/up (12 cp.async, 4 wgmma a k-step) and down (8 and 4); each in two ring depths, longest compared
    assert len(lines) == 2, linked.link_map
    assert not [d for d in linked.diagnostics if d.code == "PL183" and "moe_expert_hopper" in d.message], \
        f"grew more than {GROWTH_WARN:.0%}: " + "\n".join(lines)


def test_the_hopper_layer_has_a_separate_control_tiled_like_it(baseline):
    """Its five objects linked one kernel each take the layer's geometry (the pipeline's `geometry`): the
    dispatch lays rows out in the Hopper expert's 64-row tiles, not its contract's default of 32."""
    base, out = baseline
    objects = builds.build_hopper(out / "hopper_separate", base)
    layer = builds.link_hopper(objects)
    kernels = builds.link_separate(objects, layer.manifest.geometry)
    assert [k.manifest.kernel for k in kernels] == ["moe_router_alone", "moe_dispatch_alone", "moe_expert_hopper_alone",
                                                    "moe_expert_merge_alone", "moe_combine_alone"]
    assert {k.manifest.geometry.get("EXPERT_TILE_M") for k in kernels} == {None, 64}
    assert builds.link_separate(objects[1:2])[0].manifest.geometry["EXPERT_TILE_M"] == 32  # alone: the default
    # with a task profile (ab.py --profile): the kernels that link persistent carry one, the sequential ones none
    profiled = builds.link_separate(objects, layer.manifest.geometry, profile_tasks=1024)
    assert [k.manifest.profile_tasks for k in profiled] == [1024, 0, 0, 0, 0]
    assert [k.manifest.kernel for k in profiled] == [k.manifest.kernel for k in kernels]


def test_a_dispatch_change_propagates_into_the_hopper_layer_too(baseline, hopper_layer):
    """The modified-geometry test's Hopper column: the dispatch team's rebuilt object links with the Hopper
    expert's, its new DISPATCH_TOKENS in the kernel (run.py variants then runs it on a GPU)."""
    base, out = baseline
    variant = next(v for v in variants.VARIANTS if v.name == "dispatch-tokens")
    b = builds.build_all(out / "variant_hopper", variant.change, base, classic=False)
    hopper_objects = builds.build_hopper(out / "hopper_variant", base)
    objects = [b.pipelink_objects[0], b.pipelink_objects[1], *hopper_objects[2:4], b.pipelink_objects[3]]
    linked = builds.link_hopper(objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert linked.manifest.geometry["DISPATCH_TOKENS"] == variant.change.value != hopper_layer.manifest.geometry["DISPATCH_TOKENS"]
    assert linked.manifest.geometry["EXPERT_TILE_M"] == 64


def test_report_renders_the_hopper_column_of_the_variants():
    report = case_module(CASE, 'report')
    row = {"variant": "router-tokens", "team": "router", "change": "ROUTER_TOKENS = 16", "what": "",
           "classic": {"outcome": "wrong values", "detail": "d"}, "pipelink": {"outcome": "correct", "detail": "ok"}}
    doc = {"command": "c", "device": "d", "date": "x", "seed": 1,
           "variants": [dict(row, **{"pipelink hopper": {"outcome": "correct", "detail": "fine"}}),
                        dict(row, variant="expert-stages", team="expert")]}
    text = report.render(doc)
    assert "| variant (team: change) | classic | pipelink | pipelink, Hopper layer |" in text
    assert "| correct: ok | correct: fine |" in text and "| correct: ok | - |" in text
    del doc["variants"][0]["pipelink hopper"]
    assert "Hopper layer" not in report.render(doc)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 33), ("qwen3-30b-a3b", 16), ("qwen3-30b-a3b", 1024)])
def test_separate_controls_of_the_split_and_hopper_layers_match_torch(baseline, shape, T):
    """The split and Hopper layers' components as five kernels in stream order, twice without a reset."""
    launchers = case_module(CASE, 'launchers')
    base, out = baseline
    for name, build, link in (("split", builds.build_split, builds.link_split),
                              ("hopper", builds.build_hopper, builds.link_hopper)):
        objects = build(out / f"{name}_separate_gpu", base)
        kernels = builds.link_separate(objects, link(objects).manifest.geometry)
        impl = launchers.PipelinkSeparate.from_links(kernels)
        assert impl.expert is not None and impl.layout(case_module(CASE, 'layer').SHAPES[shape], T).splits >= 1
        _two_fresh_launches_are_correct(impl, shape, T)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 1000), ("small", 33), ("qwen3-30b-a3b", 16),
                                     ("qwen3-30b-a3b", 77), ("qwen3-30b-a3b", 128), ("qwen3-30b-a3b", 1024),
                                     ("qwen3-30b-a3b", 4096)])
def test_hopper_layer_matches_torch(hopper_layer, shape, T):
    """The wgmma expert's layer: fresh inputs, poisoned outputs (and shares), twice in a row without a reset.
    An odd T leaves the combine's last task one token (its second row of pair_tile is the dispatch's padding)."""
    launchers = case_module(CASE, 'launchers')
    impl = launchers.PipelinkLayer.from_link(hopper_layer)
    assert impl.split
    _two_fresh_launches_are_correct(impl, shape, T)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 1000), ("qwen3-30b-a3b", 16), ("qwen3-30b-a3b", 128),
                                     ("qwen3-30b-a3b", 1024)])
def test_split_layer_matches_torch(split_layer, shape, T):
    """Fresh inputs, poisoned outputs (and shares), twice in a row without a reset, then captured in a graph
    on one token set and replayed on another."""
    import torch
    launchers = case_module(CASE, 'launchers')
    layer = case_module(CASE, 'layer')
    impl = launchers.PipelinkLayer.from_link(split_layer)
    assert impl.split and impl.layout(layer.SHAPES[shape], T).splits >= 1
    s, weights, seed = _two_fresh_launches_are_correct(impl, shape, T)
    graph = launchers.CapturedLayer(launchers.PipelinkLayer.from_link(split_layer))
    buffers = layer.poisoned_buffers(graph.layout(s, T))
    for k in (3, 4):
        x = layer.make_tokens(s, T, seed + k)
        layer.poison(buffers)
        graph.run(s, x, weights, buffers)
        torch.cuda.synchronize()
        v = layer.judge(s, x, weights, buffers)
        assert v.ok, ("graph", k, v)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 1000), ("qwen3-30b-a3b", 16), ("qwen3-30b-a3b", 300)])
def test_fused_kernels_match_torch(baseline, shape, T):
    import torch
    launchers = case_module(CASE, 'launchers')
    layer = case_module(CASE, 'layer')
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


def test_report_renders_the_committed_results_unchanged():
    """Older result files (no graph or grouped_mm columns) render as they did."""
    import json
    report = case_module(CASE, 'report')
    doc = json.loads((CASE / "results" / "all.json").read_text())
    assert report.render(doc) == (CASE / "results" / "RESULTS.md").read_text()


def _bench_row(shape, T, names, gpu_names):
    return {"shape": shape, "T": T, "samples_us": {n: [1.0] for n in names},
            "median_us": {n: 100.0 + i for i, n in enumerate(names)},
            "gpu_only_us": {n: 50.0 + i for i, n in enumerate(gpu_names)}}


def test_report_renders_the_graph_and_grouped_mm_columns():
    report = case_module(CASE, 'report')
    names = ["pipelink fused", "classic fused", "separate kernels", "torch", "torch grouped_mm",
             "pipelink fused graph", "separate kernels graph", "torch grouped_mm graph"]
    gpu = [n for n in names if n != "torch"]
    tests = [{"shape": "small", "T": 16, "kernel": k, "launch": 1, "ok": True, "max_err": 0.01, "unwritten": 0,
              "routing": "ok"} for k in gpu]
    doc = {"command": "run.py all", "device": "GPU", "date": "d", "seed": 1, "tests": tests,
           "bench": [_bench_row("small", 16, names, gpu),
                     _bench_row("small", 128, names[:4], gpu[:3])]}  # a row without the new columns
    text = report.render(doc)
    header = next(line for line in text.splitlines() if line.startswith("| shape | T |"))
    for n in names:
        assert f"| {n} per call |" in header or f" {n} per call |" in header
    assert "torch grouped_mm graph GPU only" in header and "torch GPU only" not in header
    rows = [line for line in text.splitlines() if line.startswith("| small |")]
    assert rows[0].count("|") == rows[1].count("|") == header.count("|")
    assert rows[0] == "| small | 16 | " + " | ".join(str(100 + i) for i in range(8)) + " | " \
        + " | ".join(str(50 + i) for i in range(7)) + " |"
    assert rows[1].endswith("| 50 | 51 | 52 | - | - | - | - |")
    assert "7 of 7 runs correct" in text and "7 implementations" in text
    assert "replayed on another" in text and "captured once per problem into a CUDA graph" in text
    assert "no programmatic dependent launch" in text and "`torch._grouped_mm`" in text


def test_report_says_what_was_skipped():
    report = case_module(CASE, 'report')
    names = ["pipelink fused", "torch"]
    doc = {"command": "c", "device": "GPU", "date": "d", "seed": 1,
           "skipped": {"torch grouped_mm": "torch 2.4 has no torch._grouped_mm"},
           "bench": [_bench_row("small", 16, names, names[:1])]}
    text = report.render(doc)
    assert "Skipped: torch grouped_mm: torch 2.4 has no torch._grouped_mm" in text
    assert "grouped_mm per call" not in text and "graph" not in text


def test_grouped_mm_missing_is_a_reason_not_a_fallback(monkeypatch):
    import types
    launchers = case_module(CASE, 'launchers')
    layer = case_module(CASE, 'layer')
    fake = types.ModuleType("torch")
    fake.__version__ = "0.0-test"
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert launchers.grouped_mm_unavailable(layer.SHAPES.values()) == "torch 0.0-test has no torch._grouped_mm"


@pytest.mark.parametrize("split", [None, "split"])
@pytest.mark.parametrize("why", [None, "torch 0.0 has no torch._grouped_mm"])
def test_run_plumbing_names_the_graphs_of_existing_implementations(monkeypatch, why, split):
    launchers = case_module(CASE, 'launchers')
    run = case_module(CASE, 'run')
    assert set(run.GRAPHED.values()) == {"pipelink fused", "pipelink split", "pipelink hopper", "pipelink separate",
                                         "pipelink split separate", "pipelink hopper separate", "separate kernels",
                                         "torch grouped_mm"}
    assert all(g == f"{e} graph" for g, e in run.GRAPHED.items())
    made = []
    stub = lambda kind: lambda *a: made.append(kind) or kind  # noqa: E731
    monkeypatch.setattr(launchers.PipelinkLayer, "from_link", lambda linked: made.append(linked) or linked)
    monkeypatch.setattr(launchers.PipelinkSeparate, "from_links", lambda links: made.append("separate") or "separate")
    for cls in ("ClassicFused", "ClassicSeparate", "TorchLayer", "GroupedMmLayer"):
        monkeypatch.setattr(launchers, cls, stub(cls))
    monkeypatch.setattr(launchers, "grouped_mm_unavailable", lambda shapes: why)
    skipped = {}
    impls = run.implementations("linked", b"cubin", skipped, split=split, separate=["links"] if split else None,
                                hopper="hopper" if split else None,
                                separates={"pipelink hopper separate": ["h"]} if split else None)
    graphs = {n: i.impl for n, i in impls.items() if isinstance(i, launchers.CapturedLayer)}
    eager = ["pipelink fused",
             *(["pipelink split", "pipelink hopper", "pipelink separate", "pipelink hopper separate"] if split else []),
             "classic fused",
             "separate kernels", "torch"]
    eager += ["torch grouped_mm"] if why is None else []
    assert list(impls) == eager + [g for g, e in run.GRAPHED.items() if e in eager]
    # every graph wraps an instance of its own (pipelink's: its own loaded kernel and workspace)
    assert made.count("linked") == 2
    assert made.count("split") == made.count("hopper") == (2 if split else 0)
    assert made.count("separate") == (4 if split else 0)  # the first layer's control and the Hopper layer's
    want = {"pipelink fused graph": "linked", "separate kernels graph": "ClassicSeparate",
            **({"pipelink split graph": "split", "pipelink hopper graph": "hopper",
                "pipelink separate graph": "separate", "pipelink hopper separate graph": "separate"} if split else {}),
            **({"torch grouped_mm graph": "GroupedMmLayer"} if why is None else {})}
    assert graphs == want
    assert skipped == ({} if why is None else {"torch grouped_mm": why, "torch grouped_mm graph": why})


@pytest.mark.gpu
@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 1000), ("qwen3-30b-a3b", 16), ("qwen3-30b-a3b", 300)])
def test_graphs_and_grouped_mm_match_torch(baseline, shape, T):
    """Each graph is captured on one token set and replayed on another (input copied in, outputs
    poisoned again); torch's _grouped_mm path, eager and captured, where torch has it."""
    import torch
    launchers = case_module(CASE, 'launchers')
    layer = case_module(CASE, 'layer')
    run = case_module(CASE, 'run')
    base, _ = baseline
    skipped = {}
    impls = run.implementations(builds.link_pipelink(base.pipelink_objects), builds.link_classic(base.classic_objects),
                                skipped)
    s = layer.SHAPES[shape]
    seed = int.from_bytes(os.urandom(2), "little")
    weights = layer.make_weights(s, seed)
    xs = [layer.make_tokens(s, T, seed + 1), layer.make_tokens(s, T, seed + 2)]
    names = [n for n in impls if n in run.GRAPHED or n == "torch grouped_mm"]
    expected = {"pipelink fused graph", "separate kernels graph"}  # (no split layer passed)
    if not skipped:  # torch has _grouped_mm and takes the shapes
        expected |= {"torch grouped_mm", "torch grouped_mm graph"}
    assert set(names) == expected, skipped
    for name in names:
        impl = impls[name]
        buffers = layer.poisoned_buffers(impl.layout(s, T))
        for x in xs:
            layer.poison(buffers)
            impl.run(s, x, weights, buffers)
            torch.cuda.synchronize()
            v = layer.judge(s, x, weights, buffers)
            assert v.ok, (name, v)
        if isinstance(impl, launchers.CapturedLayer):
            assert len(impl._graphs) == 1  # captured once, replayed for the second token set


class _FakeTensor:
    """Enough of a tensor for CapturedLayer: a list of values at an address of its own."""
    _next = [0x1000]

    def __init__(self, values):
        self.values, self.shape = list(values), (len(values),)
        self._ptr = _FakeTensor._next[0]
        _FakeTensor._next[0] += 0x1000

    def data_ptr(self):
        return self._ptr

    def clone(self):
        return _FakeTensor(self.values)

    def copy_(self, other):
        self.values[:] = other.values
        return self


def _fake_torch(monkeypatch):
    import contextlib
    import types
    state = types.SimpleNamespace(capturing=None, stream="default", captures=0)

    class Graph:
        def __init__(self):
            self.ops = []

        def replay(self):
            for op in self.ops:
                op()

    @contextlib.contextmanager
    def stream(s):
        prev, state.stream = state.stream, s
        yield
        state.stream = prev

    @contextlib.contextmanager
    def graph(g):
        state.capturing, state.captures = g, state.captures + 1
        yield
        state.capturing = None

    class Stream:
        def wait_stream(self, other):
            pass

    cuda = types.SimpleNamespace(Stream=Stream, CUDAGraph=Graph, graph=graph, stream=stream,
                                 current_stream=lambda: Stream())
    fake = types.ModuleType("torch")
    fake.cuda = cuda
    monkeypatch.setitem(sys.modules, "torch", fake)
    return state


class _FakeImpl:
    """y[i] = x[i] * w[i], launched (or, while capturing, recorded) on the arrays it is given."""

    def __init__(self, state):
        self.state, self.runs = state, 0

    def layout(self, shape, T):
        return (shape, T)

    def run(self, shape, x, weights, buffers):
        def op():
            buffers["y"].values[:] = [a * b for a, b in zip(x.values, weights["w"].values)]
        self.runs += 1
        if self.state.capturing is not None:
            self.state.capturing.ops.append(op)
        else:
            op()


def test_captured_layer_copies_inputs_and_restores_the_poisoned_outputs(monkeypatch):
    launchers = case_module(CASE, 'launchers')
    layer = case_module(CASE, 'layer')
    state = _fake_torch(monkeypatch)
    impl = _FakeImpl(state)
    g = launchers.CapturedLayer(impl)
    s = layer.SMALL
    x1, x2, w = _FakeTensor([1, 2]), _FakeTensor([3, 4]), {"w": _FakeTensor([10, 100])}
    y = _FakeTensor([-1, -1])
    # the warm-up writes y; what the caller passed must be back before the replay: check via a spy
    restored = []
    real_capture = g._capture

    def spy(*args):
        entry = real_capture(*args)
        restored.append(list(y.values))
        return entry
    monkeypatch.setattr(g, "_capture", spy)
    g.run(s, x1, w, {"y": y})
    assert restored == [[-1, -1]] and y.values == [10, 200] and state.captures == 1 and impl.runs == 3
    g.run(s, x2, w, {"y": y})  # a replay on new inputs, copied in: no new capture
    assert y.values == [30, 400] and state.captures == 1 and impl.runs == 3
    x2.values[:] = [5, 6]      # the graph reads its own copy of x, not the caller's array
    assert y.values == [30, 400]
    g.run(s, x2, {"w": _FakeTensor([1, 1])}, {"y": y})  # new weights: copied, same graph
    assert y.values == [5, 6] and state.captures == 1
    other = _FakeTensor([0, 0])
    g.run(s, x1, w, {"y": other})  # other output buffers: a graph of their own
    assert other.values == [10, 200] and state.captures == 2 and y.values == [5, 6]
