"""Blocks per SM (core/targets.py residency) and the link map's residency section: pure functions."""
from pipelink.core.targets import TARGETS, residency


def test_residency_takes_the_tightest_resource():
    h = TARGETS["sm_90"]
    # the MoE layer: one block of 128 threads, 119040 B of shared memory: shared memory allows one
    assert residency(h, 128, 119040, 128) == (1, {"shared memory": 1, "registers": 4, "warps": 16, "blocks": 32})
    # the decode step: 256 threads at 128 registers: the register file allows two
    blocks, limits = residency(h, 256, 34816, 128)
    assert blocks == 2 and limits["registers"] == 2 and limits["shared memory"] == 6
    # registers are allocated per warp in units of 256: 56 per thread -> 1792 a warp
    assert residency(h, 160, 65664, 56)[1]["registers"] == 65536 // (1792 * 5)
    assert residency(h, 1024, 0, 32)[1]["warps"] == 2
    assert residency(h, 32, 0, 8)[0] == 32  # at most 32 blocks whatever else allows
    # the 1 KB the driver keeps per block counts: 116224 B blocks would fit twice in 228 KB without it
    assert 2 * 116224 <= h.smem_per_sm and residency(h, 128, 116224, 64)[1]["shared memory"] == 1


def test_link_map_names_what_limits_residency_and_whose_buffers_set_the_arena():
    from contract_factory import shipped_component
    from pipelink.core.pipeline import PipelineSpec
    from pipelink.linker.passes import LinkOptions, run_passes
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k", schedule="persistent")),
                     components=[shipped_component("splitk_partial"), shipped_component("splitk_reduce")],
                     until="allocate")
    from pipelink.linker.emit import link_map
    text = link_map(ctx.resolved, ctx.allocation, "sm_90")
    assert "## residency (sm_90, one SM)" in text
    line = text.split("## residency (sm_90, one SM)\n")[1].splitlines()[0]
    assert "limited by" in line and "threads" in line
    assert "  L1 data cache " in text.split("## residency (sm_90, one SM)\n")[1]


def test_l1_left_is_the_unified_cache_less_the_smallest_shared_capacity_that_holds_the_blocks():
    from pipelink.core.targets import KB, l1_left
    h = TARGETS["sm_90"]
    # the decode step's two blocks of 38016 B (78080 B with the driver's 1 KB each): 100 KB shared, 156 KB of L1
    assert l1_left(h, 2, 38016) == (100 * KB, 156 * KB)
    # the sizes measured on an H200 (docs/architecture.md): 71680 B a block -> 164 KB shared; 106496 -> 228
    assert l1_left(h, 2, 71680) == (164 * KB, 92 * KB)
    assert l1_left(h, 2, 106496) == (228 * KB, 28 * KB)
    assert l1_left(h, 1, 221696) == (228 * KB, 28 * KB)  # the MoE layer's one block
    assert l1_left(h, 4, 0) == (8 * KB, 248 * KB)  # the reserved KB alone needs a step
    assert l1_left(TARGETS["sm_86"], 1, 50 * KB) == (64 * KB, 64 * KB)  # 128 KB unified on sm_86
    assert l1_left(TARGETS["sm_80"], 1, 100 * KB) == (132 * KB, 60 * KB)
    assert l1_left(h, 0, 1024) is None


def test_link_map_names_whose_buffers_take_the_l1_when_shared_memory_does_not_limit_the_blocks():
    """Two blocks of 70 KB are held to two by their registers, not their shared memory; what they leave of L1
    (92 KB of 256) is still the arena's doing, so the map says whose buffers set its size."""
    import dataclasses
    from contract_factory import shipped_component
    from pipelink.core.pipeline import PipelineSpec
    from pipelink.linker.allocate import Placed, SmemItem
    from pipelink.linker.emit import _residency_rows
    from pipelink.linker.passes import LinkOptions, run_passes
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k", schedule="persistent")),
                     components=[shipped_component("splitk_partial"), shipped_component("splitk_reduce")],
                     until="allocate")
    life = ctx.allocation.smem[0].item.lifetime
    def rows(nbytes):
        item = SmemItem("buffer big.ring", "buffer", "big", nbytes, 16, life)
        a = dataclasses.replace(ctx.allocation, smem=[Placed(item, 0)], smem_bytes=nbytes, block_warps=8, registers=128)
        return "\n".join(_residency_rows(ctx.resolved, a, "sm_90", None))
    text = rows(70 * 1024)
    assert "2 blocks of 256 threads" in text and "limited by registers" in text and "L1 data cache 92 KB" in text
    assert "the arena's size is set by big: 71680 of its 71680 B" in text
    # 38 KB blocks leave 156 KB of L1: nothing to name
    assert "the arena's size is set by" not in rows(38 * 1024)


def test_registers_are_held_four_warps_at_a_time():
    """An SM places warps on its four schedulers' quarters of the register file: a block of 9 warps at 176
    registers a thread (5632 a warp, 3 warps on a quarter: 16896 of 16384) does not launch, though 9 x 5632 fits
    in 65536 (the driver allows 256 threads of such a kernel); at 168 it does. So the kernel's budget stops at 168
    where a component asks for 176 (the Llama decode step with its in-entry-waiting down projection, 288
    threads: linked at 170, refused at launch)."""
    from pipelink.linker.allocate import kernel_register_budget
    h = TARGETS["sm_90"]
    assert residency(h, 288, 173568, 176)[1]["registers"] == 0
    assert residency(h, 288, 173568, 168) == (1, {"shared memory": 1, "registers": 1, "warps": 7, "blocks": 32})
    assert residency(h, 256, 173568, 176)[1]["registers"] == 1
    assert kernel_register_budget(h, 288, 173568, [128, 168, 176]) == 168
    assert kernel_register_budget(h, 256, 173568, [128, 168, 176]) == 176


def test_a_cap_whose_block_the_register_file_cannot_hold_is_refused(tmp_path, capsys):
    import json

    from pipelink.cli import main
    from test_in_entry_waits import FILL
    raw = json.loads(json.dumps(FILL))
    raw["threads"]["warps"], raw["registers"]["max_per_thread"] = 9, 176
    raw["barriers"]["named"][0]["threads"] = 288
    (tmp_path / "fill.json").write_text(json.dumps(raw))
    (tmp_path / "p.json").write_text(json.dumps({"pipeline": 1, "name": "k", "schedule": "persistent"}))
    code = main(["check", str(tmp_path / "fill.json"), "--pipeline", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 1 and "error[PL046]" in err and "hold 8 warps of it" in err and "fewer than the block's 9" in err, err
    assert "at /registers/max_per_thread" in err
    raw["registers"]["max_per_thread"] = 168
    (tmp_path / "fill.json").write_text(json.dumps(raw))
    assert main(["check", str(tmp_path / "fill.json"), "--pipeline", str(tmp_path / "p.json")]) == 0
