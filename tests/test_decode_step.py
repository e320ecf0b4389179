"""The whole Llama-3.2-1B decode step as one kernel, on the CPU: every team's component built, the three step
pipelines linked (split-KV attention, whole-context attention, GEMVs through shared-memory rings), and what the
case study's driver passes is what each linked kernel takes, with the extents the launcher will check."""
import json
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_kernels  # noqa: E402
import decode_model  # noqa: E402
import decode_parts  # noqa: E402


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    return decode_kernels.build_objects(tmp_path_factory.mktemp("step"))


@pytest.fixture(scope="module")
def linked(objects):
    return {variant: decode_kernels.link_mega(objects, variant) for variant in decode_kernels.MEGA_PIPELINES}


@pytest.mark.parametrize("variant", sorted(decode_kernels.MEGA_PIPELINES))
def test_step_links_into_one_kernel(linked, variant):
    result = linked[variant]
    assert result.ok, [d.render() for d in result.diagnostics]
    m = result.manifest
    if variant.startswith("lr"):
        # the loader ring: the pipeline's slots of 32 KB (a task's packed rows, one bulk copy each) beside the
        # tasks' scratch (under 48 KB), and the loader warp after the 8 compute warps: one CTA an SM, the GEMVs'
        # caps (168) its register budget, no spills (more registers than 168 a thread and the block of 9 warps
        # would not fit the register file: test_residency.py)
        slots = json.loads(decode_kernels.MEGA_PIPELINES[variant].read_text())["loader_slots"]
        assert m.schedule == "persistent" and m.block == (288, 1, 1)
        assert slots * 32 * 1024 <= m.dynamic_smem <= (slots * 32 + 48) * 1024, (slots, m.dynamic_smem)
        assert "  1 block of 288 threads" in result.link_map, result.link_map.split("## residency")[1][:300]
        assert m.resources.registers <= 168 and m.resources.frame_bytes == 0, m.resources
        return
    assert m.schedule == "persistent" and m.block == (256, 1, 1)
    # two CTAs an SM: every buffer is per-task scratch, shared across the calls' components (the ring steps add
    # two slots of a task's first 8 rows x 2048 columns)
    assert m.dynamic_smem <= (110 * 1024 if variant.startswith("ring") else 40 * 1024)
    assert "  2 blocks of 256 threads" in result.link_map, result.link_map.split("## residency")[1][:300]
    assert m.tasks["down"].startswith("(NL) * ") and not m.tasks["lm_head"].startswith("(NL)")
    # no spills under the joint 128-register cap (16 rows of W in registers at once made a 40-byte frame and a
    # 5% slower step: gemv.cuh loads a 16-row task's chunk in two rounds). The ring steps spill (40 and 24
    # bytes): their GEMVs also hold their slots' addresses and barriers, and read the slot rows at the mma;
    # pf's output projection holds its L2-prefetch rows across the wait and spills 8 bytes.
    assert m.resources.registers <= 128
    spill_limit = {"ring": 40, "ring_od": 40, "pf": 8}.get(variant, 0)
    assert m.resources.frame_bytes <= spill_limit, m.resources


def test_attentions_split_count_is_the_pipelines_and_the_loader_asks_l2_ahead(objects, linked):
    """attn_split consumes SPLIT_TASKS (how many split tasks fill the kernel): 256 by default, what the pipeline's
    `geometry` gives otherwise (the loader step's: 128, one block an SM), for the splits and their merge alike. The link
    (lr_deal_st128_ahead2) has load_ahead 2: every `_lr` GEMV's loader says ahead, so the loader asks L2 for the
    CTA's task two on in each of their calls; the compute warps' code is not touched and nothing spills.
    (One megakernel link for both: each costs CI a quarter of a minute.)"""
    assert linked["split"].manifest.geometry["SPLIT_TASKS"] == 256
    assert linked["lr"].manifest.geometry["SPLIT_TASKS"] == 128
    st = decode_kernels.link_mega(objects, "lr_deal_st128_ahead2")
    assert st.ok, [d.render() for d in st.diagnostics]
    assert st.manifest.geometry["SPLIT_TASKS"] == 128
    assert st.manifest.tasks["attn_split"] != linked["split"].manifest.tasks["attn_split"]
    assert "128" in st.manifest.tasks["attn_split"], st.manifest.tasks["attn_split"]
    loader = st.glue[st.glue.index("// the loader warp"):st.glue.index("int pl_ring_pos = 0;  // the next task's")]
    for call in ("qkv", "o_proj", "gate_up", "down", "lm_head"):
        part = loader[loader.index(f"// {call}\n"):]
        assert part.index("// ask L2 ahead while the ring is full (load_ahead 2)") < \
            part.index("tile.ring = pl_ring_pos;"), call
    assert "pl_ring__ahead = 2u;" in st.glue and "pl_ring__ahead = 0u;" in linked["lr"].glue
    assert "tile.ahead" not in linked["lr"].glue
    assert st.manifest.resources.frame_bytes == 0 and st.manifest.resources.registers <= 168


def test_the_separate_kernel_control_links_the_loader_units_with_the_steps_loader_settings(objects, monkeypatch,
                                                                                          tmp_path):
    """parts_lr_graph's `_lr` units get decode_step_lr.json's loader fields (here with loader_l2 evict_first
    added): the unfused control streams W as the megakernel does."""
    import json
    doc = json.loads(decode_kernels.MEGA_PIPELINES["lr"].read_text())
    doc["loader_l2"] = "evict_first"
    (tmp_path / "decode_step_lr.json").write_text(json.dumps(doc))
    monkeypatch.setitem(decode_kernels.MEGA_PIPELINES, "lr", tmp_path / "decode_step_lr.json")
    options = decode_kernels.lr_loader_options()
    assert options["loader_l2"] == "evict_first" and options["loader_slots"] == doc["loader_slots"]
    result, _ = decode_kernels.link_part(objects, ("gemv_residual_lr",), None, False, options)
    assert "pl_ring__evict_first = 1u;" in result.glue and f"pl_ring__slots = {doc['loader_slots']}u;" in result.glue


@pytest.mark.parametrize("variant", sorted(decode_kernels.MEGA_PIPELINES))
def test_the_driver_passes_every_parameter_with_its_extents(linked, variant):
    """The driver's tensors (by the megakernel's names) against the manifest: every parameter has a value, and
    every tensor's element count covers every extent a component declares (B = 8, Lmax = 4096)."""
    from pipelink.core.expr import parse
    m = linked[variant].manifest
    B, Lmax = 8, 4096
    shapes = dict(decode_model.weight_shapes())
    shapes.update(decode_model.packed_weight_shapes())
    shapes.update(decode_model.scratch_shapes(B, Lmax))
    shapes.update(k_cache=decode_model.cache_shape(B, Lmax), v_cache=decode_model.cache_shape(B, Lmax),
                  token=(B,), pos=(B,), inv_freq=(32,))
    scalars = dict(B=B, H=decode_model.HIDDEN, I=decode_model.INTERMEDIATE, V=decode_model.VOCAB,
                   NL=decode_model.LAYERS, L=Lmax, Lmax=Lmax)
    env = dict(scalars, **m.geometry)
    for p in m.user_params:
        if not p.pointer:
            assert p.name in scalars or p.dtype == "f32", p.name
            continue
        assert p.name in shapes, f"{variant}: the driver has no tensor '{p.name}'"
        have = 1
        for e in shapes[p.name]:
            have *= e
        for shape in p.shapes:
            need = 1
            for e in shape:
                need *= parse(e).evaluate(env)
            assert have >= need, f"{variant}: '{p.name}' holds {have} elements, a component declares {shape} = {need}"


def test_the_ring_step_differs_from_the_plain_one_only_in_its_gemvs():
    import json
    plain = json.loads((CASE / "pipelines" / "decode_step.json").read_text())
    ring = json.loads((CASE / "pipelines" / "decode_step_ring.json").read_text())
    swap = {n: n + "_ring" for n in ("gemv_residual", "gemv_swiglu_normed", "qkv_rope_normed", "lm_head")}
    assert len(plain["calls"]) == len(ring["calls"])
    for a, b in zip(plain["calls"], ring["calls"]):
        comp = a.get("component", a["name"])
        if comp in swap:
            a = dict(a, component=swap[comp])
        assert a == b
    assert {p.name for p in decode_parts.RING_PARTS} == set(swap.values())


def test_the_last_step_swaps_only_the_attention():
    import json
    plain = json.loads((CASE / "pipelines" / "decode_step.json").read_text())
    last = json.loads((CASE / "pipelines" / "decode_step_last.json").read_text())
    names = [c["name"] for c in last["calls"]]
    assert names == [c["name"] for c in plain["calls"] if c["name"] not in ("attn_split", "attn_merge")][:2] + ["attn"] + \
        [c["name"] for c in plain["calls"] if c["name"] not in ("attn_split", "attn_merge")][2:]
    attn = last["calls"][names.index("attn")]
    assert attn["component"] == "attn_last" and attn["after"] == ["qkv"]
    assert last["calls"][names.index("o_proj")]["after"] == ["attn"]


def test_the_loader_step_swaps_only_the_gemvs():
    """decode_step_lr.json is decode_step.json with the four GEMV components' `_lr` versions (one team's folder)
    and the ring's slot count: the same calls, bindings and events, but W bound to its packed form (the model's
    PACKED_WEIGHTS, made from the weight the plain call binds for the component that reads it)."""
    import json
    plain = json.loads((CASE / "pipelines" / "decode_step.json").read_text())
    lr = json.loads((CASE / "pipelines" / "decode_step_lr.json").read_text())
    swap = {n: n + "_lr" for n in ("gemv_residual", "gemv_swiglu_normed", "qkv_rope_normed", "lm_head")}
    assert lr["loader_slots"] >= 2 and len(plain["calls"]) == len(lr["calls"])
    for a, b in zip(plain["calls"], lr["calls"]):
        name = a.get("component", a["name"])
        assert b.get("component", b["name"]) == swap.get(name, name)
        if name in swap:
            packed = b["bind"]["w"]
            assert decode_model.PACKED_WEIGHTS[packed][:2] == (a["bind"]["w"], swap[name]), packed
            b = dict(b, bind=dict(b["bind"], w=a["bind"]["w"]))
        assert {k: v for k, v in a.items() if k != "component"} == {k: v for k, v in b.items() if k != "component"}


def test_the_loader_steps_last_variant_is_the_loader_step_with_the_last_steps_attention():
    """decode_step_lr_last.json: decode_step_lr.json's calls with attn_split -> attn_merge replaced by
    decode_step_last.json's `attn` call (attn_last), the output projection after it; every other call the same."""
    import json
    lr = json.loads((CASE / "pipelines" / "decode_step_lr.json").read_text())
    last = json.loads((CASE / "pipelines" / "decode_step_last.json").read_text())
    lr_last = json.loads((CASE / "pipelines" / "decode_step_lr_last.json").read_text())
    attn = next(c for c in last["calls"] if c["name"] == "attn")
    want = []
    for c in lr["calls"]:
        if c["name"] == "attn_split":
            want.append(attn)
        elif c["name"] != "attn_merge":
            want.append(dict(c, after=["attn"]) if c["name"] == "o_proj" else c)
    assert lr_last["calls"] == want
    assert {k: v for k, v in lr_last.items() if k not in ("calls", "name", "description")} == \
        {k: v for k, v in lr.items() if k not in ("calls", "name", "description")}


def test_the_pieces_step_is_the_loader_step_with_down_waiting_in_its_entry(linked):
    """decode_step_lrp.json: decode_step_lr.json with the down projection's component the one that waits for
    gate/up's pieces of h in its entry (gemv_residual_lr_pieces), and no `after` of gate/up for it: the event
    h_piece orders them, piece by piece; every other call and field the same. The link's map says so."""
    import json
    lr = json.loads((CASE / "pipelines" / "decode_step_lr.json").read_text())
    lrp = json.loads((CASE / "pipelines" / "decode_step_lrp.json").read_text())
    want = [dict({k: v for k, v in c.items() if k != "after"}, component="gemv_residual_lr_pieces")
            if c["name"] == "down" else c for c in lr["calls"]]
    assert lrp["calls"] == want
    assert {k: v for k, v in lrp.items() if k not in ("calls", "name", "description")} == \
        {k: v for k, v in lr.items() if k not in ("calls", "name", "description")}
    link_map = linked["lrp"].link_map
    assert "gate_up notifies t->t; down waits n->: for 1 in its entry, element by element" in link_map
    assert "pl_after_gate_up" not in link_map  # nobody waits for all of gate/up any more
    assert "h_piece" not in linked["lr"].link_map  # an event nobody waits for is dropped
    # each down task's context names its own layer's pieces, and the compute warps (not the loader) meet after it
    glue = linked["lrp"].glue
    (first,) = [line for line in glue.splitlines() if "pl_ctx0->first = " in line]
    assert "(long long)pl_layer * e" in first, first
    assert "pl::glue::compute_sync<256>();  // the in-entry wait contexts are written before the entry reads them" in glue


def test_the_normed_head_step_is_the_loader_step_with_the_final_norm_in_the_lm_head(linked):
    """decode_step_lr_hn.json: decode_step_lr.json without the final_norm call, its LM head the component that norms
    the last layer's residual x itself (lm_head_normed_lr: x, norm_w for xn) after the last layer's down; every
    other call and field the same: no rmsnorm in the link, and the kernel takes no xn."""
    import json
    lr = json.loads((CASE / "pipelines" / "decode_step_lr.json").read_text())
    hn = json.loads((CASE / "pipelines" / "decode_step_lr_hn.json").read_text())
    want = []
    for c in lr["calls"]:
        if c["name"] == "lm_head":
            want.append(dict(c, component="lm_head_normed_lr", bind=dict(c["bind"], x="x", norm_w="final_norm_w"),
                             after=["down"]))
        elif c["name"] != "final_norm":
            want.append(c)
    assert [c["name"] for c in hn["calls"]] == [c["name"] for c in want]
    assert hn["calls"] == want
    assert {k: v for k, v in hn.items() if k not in ("calls", "name", "description")} == \
        {k: v for k, v in lr.items() if k not in ("calls", "name", "description")}
    m = linked["lr_hn"].manifest
    params = {p.name for p in m.user_params}
    assert {"x", "final_norm_w", "eps", "w_lm_packed"} <= params and "xn" not in params, params
    assert "rmsnorm" not in linked["lr_hn"].link_map and "rmsnorm" in linked["lr"].link_map


def test_the_merged_step_is_the_loader_step_with_the_merge_in_the_output_projection(linked):
    """decode_step_lrm.json: decode_step_lr.json without the attn_merge call, its output projection the component
    that merges attention's split states itself (gemv_residual_lr_merged: `part` for x) after every split task;
    every other call and field the same. The link's map: o_proj waits for all of attn_split, nobody for `splits`."""
    import json
    lr = json.loads((CASE / "pipelines" / "decode_step_lr.json").read_text())
    lrm = json.loads((CASE / "pipelines" / "decode_step_lrm.json").read_text())
    want = []
    for c in lr["calls"]:
        if c["name"] == "o_proj":
            bind = {k: v for k, v in c["bind"].items() if k != "x"}
            want.append(dict(c, component="gemv_residual_lr_merged", bind=dict(bind, part="attn_part"),
                             after=["attn_split"]))
        elif c["name"] != "attn_merge":
            want.append(c)
    assert lrm["calls"] == want
    assert {k: v for k, v in lrm.items() if k not in ("calls", "name", "description")} == \
        {k: v for k, v in lr.items() if k not in ("calls", "name", "description")}
    link_map = linked["lrm"].link_map
    assert "attn_merge" not in link_map and "pl_after_attn_split" in link_map
    assert "splits[B, 8]" in linked["lr"].link_map and "splits[" not in link_map  # nobody waits: dropped
    # o_proj counts every split task of its layer, and reads their records with their count: it consumes the
    # kernel's SPLIT_TASKS and attn_split's SPLIT_MIN_L
    assert "attn_split notifies ijk->:; o_proj waits i->0 for ((B * 8) * ((((L + 128 - 1) / 128))" in link_map
    assert "SPLIT_MIN_L = 128  (provided by attn_split; consumed by o_proj" in link_map


def test_the_ring_od_step_swaps_only_the_output_and_down_projections():
    import json
    plain = json.loads((CASE / "pipelines" / "decode_step.json").read_text())
    mixed = json.loads((CASE / "pipelines" / "decode_step_ring_od.json").read_text())
    assert len(plain["calls"]) == len(mixed["calls"])
    swapped = []
    for a, b in zip(plain["calls"], mixed["calls"]):
        if a.get("component") == "gemv_residual":
            a = dict(a, component="gemv_residual_ring")
            swapped.append(a["name"])
        assert a == b
    assert swapped == ["o_proj", "down"]


def test_counts_per_cta_adds_each_whole_call_event_once_per_cta(objects, linked):
    # decode_step.json (counts_per_cta on by default under its static schedule): the `after` events and the
    # head's `partials` (n->:) are added once per CTA and call, by the count of its tasks; `splits` (bhs->bh:
    # one element per (b, h)) still per task. "counts_per_cta": false keeps one add per task.
    per_task = decode_kernels.link_mega(objects, "split_per_task")
    assert per_task.ok, [d.render() for d in per_task.diagnostics]
    cta, glue, plain = linked["split"], linked["split"].context.glue, per_task.context.glue
    assert "pl_count_" not in plain and "pl_count_" in glue
    batched = [ln for ln in glue.splitlines() if "atomicAdd(" in ln and "this CTA's tasks of the call" in ln]
    names = {ln.split("'")[1] for ln in batched}
    assert {"pl_after_qkv", "pl_after_o_proj", "pl_after_gate_up", "pl_after_down", "partials"} <= names
    assert not [ln for ln in glue.splitlines() if "add_one(" in ln and ("pl_after_" in ln or "'partials'" in ln)]
    assert [ln for ln in glue.splitlines() if "add_one(" in ln and "'splits'" in ln]
    m = cta.manifest
    assert m.resources.frame_bytes == 0 and m.resources.registers <= 128


def test_lr_l2_asks_bit_16_keeps_the_normed_gemvs_norm_w_in_l2(objects, linked):
    """LR_L2_ASKS 19 (3 and bit 16, variant lr_nwl): the normed q/k/v and gate/up stages read norm_w with an L2
    evict_last policy, so some of the step's read-only 16-byte loads carry a cache-policy descriptor that none of
    the shipped step's (3) carries; the final norm (rmsnorm, no such value) and everything else stay as they are."""
    import re
    from pipelink import toolchain

    def constant_descriptors(result):
        sass = toolchain.disassemble(result.cubin)
        return [m.group(1) for m in re.finditer(r"LDG\.E\.128\.CONSTANT R\d+, desc\[(UR\d+)\]", sass)]

    shipped = constant_descriptors(linked["lr"])
    kept = decode_kernels.link_mega(objects, "lr_nwl")
    assert kept.ok, [d.render() for d in kept.diagnostics]
    policy = constant_descriptors(kept)
    assert len(policy) == len(shipped)
    assert set(policy) - set(shipped), (shipped, policy)
