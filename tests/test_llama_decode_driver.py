"""The Llama-3.2-1B decode driver's pure parts on the CPU (case_studies/llama32_1b_decode: decode_model.py, decode_kernels.py,
decode_report.py): the weight layout plan, shapes, bytes per step, the separate-kernels launch order and arguments,
the report and its summary line. No torch."""
import json
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_kernels as kernels  # noqa: E402
import decode_model as model  # noqa: E402
import decode_report as report  # noqa: E402


# --- layout -----------------------------------------------------------------------------------------------

def test_weight_shapes_match_the_megakernel_interface():
    s = model.weight_shapes()
    assert s["w_qkv"] == (16, 3072, 2048)
    assert s["w_o"] == (16, 2048, 2048)
    assert s["w_gu"] == (16, 16384, 2048)
    assert s["w_down"] == (16, 2048, 8192)
    assert s["attn_norm_w"] == s["mlp_norm_w"] == (16, 2048)
    assert s["embed_w"] == s["w_lm"] == (128256, 2048)
    assert s["inv_freq"] == (32,)
    assert model.cache_shape(8, 4096) == (16, 64, 4096, 64)


def test_layer_plan_concatenates_q_k_v_and_gate_up_in_order():
    assert model.layer_sources("w_qkv", 3) == ["model.layers.3.self_attn.q_proj.weight",
                                               "model.layers.3.self_attn.k_proj.weight",
                                               "model.layers.3.self_attn.v_proj.weight"]
    assert model.layer_sources("w_gu", 0) == ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"]
    assert set(model.LAYER_PLAN) | {"embed_w", "w_lm", "final_norm_w", "inv_freq"} == set(model.weight_shapes())


def test_config_is_llama32_1b():
    c = model.LLAMA32_1B
    assert (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]) == (2048, 8192, 16)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["vocab_size"]) == (32, 8, 64, 128256)
    assert c["rope_scaling"]["rope_type"] == "llama3" and c["rope_scaling"]["factor"] == 32.0
    assert c["tie_word_embeddings"] and c["rope_theta"] == 500000.0


def test_scratch_shapes_and_workspaces():
    s = model.scratch_shapes(8, 1000)
    assert s["attn_part"] == (64, 4, 264)
    assert s["head_part"] == (8, 8016)
    assert s["q"] == s["o"] == (8, 32, 64) and s["h"] == (8, 8192) and s["logits"] == (8, 128256)
    assert set(s) == set(model.scratch_dtypes())
    import decode_parts
    assert model.attn_workspace_shape(3, 4097) == decode_parts.attn_workspace_shape(3, 4097)
    assert s["head_part"] == decode_parts.argmax_workspace_shape(8, 128256)


def test_weight_bytes_per_step_is_the_515_us_floor():
    per_layer = 2048 + 3072 * 2048 + 2048 * 2048 + 2048 + 2 * 8192 * 2048 + 2048 * 8192
    want = 2 * (16 * per_layer + 128256 * 2048 + 2048 + 2048)
    assert model.weight_bytes_per_step(1) == want
    assert 514 < model.floor_us(want) < 516
    assert model.kv_bytes_per_step(1, 1024) == 16 * 8 * 1024 * 64 * 2 * 2


def test_profile_weight_bytes_of_the_calls_add_up_to_a_step():
    """decode_profile's bytes per call, over one step's launches (parts_schedule), are the step's weight bytes."""
    import decode_profile as profile
    for B in (1, 8):
        calls = [call for _, _, call in kernels.parts_schedule(16)]
        assert sum(profile.call_weight_bytes(c, B) for c in calls) == model.weight_bytes_per_step(B)
    assert profile.call_weight_bytes("attn", 1) == 0


def test_profile_layer_fit_recovers_a_layer_and_the_rest():
    """--layers' fit: launches of n layers taking rest + n * layer give back layer and rest, noise or not."""
    import decode_profile as profile
    per_layer, rest = profile.layer_fit({n: 120.0 + 45.5 * n for n in (0, 1, 2, 4, 8, 16)})
    assert per_layer == pytest.approx(45.5) and rest == pytest.approx(120.0)
    per_layer, rest = profile.layer_fit({0: 121.0, 1: 165.0, 2: 211.5, 4: 302.0, 8: 484.5, 16: 848.0})
    assert 45.0 < per_layer < 46.0 and 118.0 < rest < 122.0


@pytest.mark.parametrize("argv", [["--tasks", "lr_nosuch"], ["--tasks", "pipelink_lr_nosuch"],
                                  ["--layers", "pipelink_lr", "pipelink_lr_nosuch"], ["--layers", "lr_nosuch"]])
def test_profile_refuses_an_unknown_variant_before_it_builds_anything(argv, capsys):
    """decode_profile's --tasks and --layers take megakernel variants with pipelink_ before them or not; an
    unknown name is a usage error (exit 2) naming it, before the model, objects or torch are touched."""
    import decode_profile as profile
    with pytest.raises(SystemExit) as e:
        profile.main(argv)
    assert e.value.code == 2 and "no megakernel variant 'lr_nosuch'" in capsys.readouterr().err


def test_pick_args_takes_the_call_first_and_names_what_is_missing():
    assert model.pick_args(["x", "B"], {"x": 1, "unused": 2}, {"x": 0, "B": 8}) == {"x": 1, "B": 8}
    with pytest.raises(KeyError, match="'theta'"):
        model.pick_args(["theta"], {}, {"B": 1}, "qkv_rope")


# --- the separate-kernels step ----------------------------------------------------------------------------

def test_parts_schedule_per_layer_order():
    s = kernels.parts_schedule(2, "split")
    assert s[0] == ("embed", None, "embed")
    assert [c for _, _, c in s[1:6]] == ["qkv", "attn", "o_proj", "gate_up", "down"]  # the megakernel's calls
    assert all(layer == 1 for _, layer, _ in s[6:11])
    assert s[-2:] == [("rmsnorm", None, "final_norm"), ("lm_head", None, "head")]
    assert len(kernels.parts_schedule(16, "head", embed=False)) == 16 * 5 + 2
    assert ("attn_head", 0, "attn") in kernels.parts_schedule(1, "head")
    assert {u for u, _, _ in kernels.parts_schedule(1, "split")} <= set(kernels.PART_UNITS)


class Fake:
    """Stands for a tensor: indexing and reshape keep a name."""

    def __init__(self, name, shape=(1,)):
        self.name, self.shape = name, shape

    def __getitem__(self, i):
        return Fake(f"{self.name}[{i}]", self.shape[1:])

    def reshape(self, *shape):
        return Fake(f"{self.name}.reshape", shape)


def _common(B=2, L=5, Lmax=256):
    t = {n: Fake(n, s) for n, s in model.weight_shapes().items()}
    t.update({n: Fake(n, s) for n, s in model.scratch_shapes(B, Lmax).items()})
    t.update(k_cache=Fake("k_cache", model.cache_shape(B, Lmax)), v_cache=Fake("v_cache", model.cache_shape(B, Lmax)),
             token=Fake("token", (B,)), pos=Fake("pos", (B,)))
    t.update(B=B, H=2048, I=8192, V=128256, NL=16, eps=1e-5, L=L, Lmax=Lmax, theta=500000.0)
    return t


def _contract_params(part):
    return [p["name"] for p in json.loads(part.contract.read_text())["entry"]["params"]]


@pytest.mark.parametrize("attention", ["split", "head"])
def test_every_component_parameter_gets_a_value(attention):
    parts = {p.name: p for p in kernels.all_parts()}
    t = _common()
    for unit, layer, call in kernels.parts_schedule(16, attention, embed="embed" in parts):
        names, _ = kernels.PART_UNITS[unit]
        for n in names:
            args = model.pick_args(_contract_params(parts[n]), kernels.call_args(call, layer, t), t, n)
            assert set(args) == set(_contract_params(parts[n]))


def test_call_args_slice_the_layer_and_chain_the_residual():
    t = _common()
    assert kernels.call_args("qkv", 3, t)["w"].name == "w_qkv[3]"
    assert kernels.call_args("qkv", 3, t)["k_cache"].name == "k_cache[3]"
    assert kernels.call_args("attn", 5, t)["k"].name == "k_cache[5]"
    o = kernels.call_args("o_proj", 0, t)
    assert (o["r"].name, o["y"].name, o["N"], o["K"]) == ("x", "x1", 2048, 2048)
    d = kernels.call_args("down", 0, t)
    assert (d["x"].name, d["r"].name, d["y"].name, d["K"]) == ("h", "x1", "x", 8192)
    assert kernels.call_args("mlp_norm", 2, t)["x"].name == "x1"
    assert kernels.call_args("head", None, t)["part"].name == "head_part"


def test_pipeline_components_each_once(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"pipeline": 1, "components": ["a", "b", "a", "c"]}))
    assert kernels.pipeline_components(p) == ["a", "b", "c"]


# --- report -----------------------------------------------------------------------------------------------

def _results():
    lat = []
    for B in (1, 8):
        for ctx in (16, 256, 1024, 4096, 16384):
            for v, t in (("pipelink_split", 720.0), ("pipelink_lr", 700.0), ("pipelink_head", 690.0 + ctx / 10),
                         ("parts_graph", 800.0), ("parts_lr_graph", 850.0), ("torch_graph", 1500.0),
                         ("torch_eager", 9000.0)):
                lat.append(dict(B=B, ctx=ctx, variant=v, median_us=t + B, min_us=t, mean_us=t, n=50))
    corr = dict(batch=1, prompt=[1, 2, 3], steps=64, atol=0.1, rtol=0.02, reference_tokens=[5] * 64, variants={
        "pipelink_lr": dict(max_abs_err=0.03, ref_absmax=4.0, argmax_match=63, generated=64, steps=67,
                               mismatches=[dict(step=40, position=40, ref=5, got=[6], ref_top2_margin=0.01,
                                                max_abs_err=0.02)], tokens=[5] * 64, token_is_logit_argmax=67,
                               within_tolerance=True)})
    return dict(command="python run.py", machine="NVIDIA H200, 143771 MiB", date="2026-01-01T00:00:00+00:00",
                torch="2.x", transformers="4.x", seed=0, checkpoint=None, errors={"x": "boom"},
                latency=lat, correctness=corr)


def test_summary_line():
    """The summary's megakernel (SUMMARY_VARIANT) against the faster of the separate-kernel graphs."""
    line = report.summary_line(_results())
    assert report.SUMMARY_VARIANT == "pipelink_lr"
    assert line == ("summary: bs1 ctx1024 701 us/step; vs reference graph 2.14x; vs separate-kernel graph 1.14x; "
                    "greedy tokens identical 63/64")
    faster_lr_parts = _results()
    for r in faster_lr_parts["latency"]:
        if r["variant"] == "parts_lr_graph":
            r["median_us"] = 750.0
    assert "vs separate-kernel graph 1.07x" in report.summary_line(faster_lr_parts)


@pytest.mark.parametrize("machine, card, peak", [
    ("NVIDIA H200, 143771 MiB, 580.159.04, 1980 MHz", "H200", 4.8e12),
    ("NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04, 1980 MHz", "H100", 3.35e12),
    ("NVIDIA B200, 183359 MiB", None, 4.8e12)])
def test_the_headline_counts_bandwidth_against_the_runs_own_card(machine, card, peak):
    """A run on an H100 had its bandwidth reported as a share of the H200's peak: the peak is the card's the run
    names, and a card the report does not know is said to be counted against the H200's."""
    assert model.hbm_peak(machine)[0] == (card or "H200") and model.hbm_peak(machine)[2] == (card is not None)
    res = _results()
    res["machine"] = machine
    head = report.render(res).split("## Latency per step")[1].split("##")[0]
    share = 100 * model.weight_bytes_per_step(1) / 701e-6 / peak  # the loader step's 701 us
    assert f"| {share:.1f}% |" in head and f"{peak / 1e12:.2f} TB/s" in head, head
    assert ("not known here" in head) == (card is None)
    assert ("this run's card is not theirs" in head) == (card not in ("H200", None))


def test_summary_line_without_results():
    assert report.summary_line({}) == ("summary: bs1 ctx1024 n/a us/step; vs reference graph n/a; vs separate-kernel "
                                       "graph n/a; greedy tokens identical n/a")


def test_render_has_every_table_and_ends_with_the_summary():
    md = report.render(_results())
    for heading in ("## Correctness", "## Latency per step at B=1, ctx=1024", "## Attention swap",
                    "## Achieved bandwidth", "## Errors"):
        assert heading in md
    assert "759.83" in md and "794.74" in md and PUBLISHED in md
    assert "63/64" in md and "top-2 margin 0.01" in md
    assert md.rstrip().splitlines()[-1].startswith("summary: ")
    # the swap table: 10 rows (2 batches x 5 contexts)
    swap = md.split("## Attention swap")[1].split("##")[0]
    assert sum(1 for line in swap.splitlines() if line.startswith("| 1 |") or line.startswith("| 8 |")) == 10
    assert report.render({}).rstrip().splitlines()[-1].startswith("summary: ")


PUBLISHED = "msaroufim/megakernels-vs-cuda-graphs"


def test_report_main_writes_results_md(tmp_path, capsys):
    path = tmp_path / "decode.json"
    path.write_text(json.dumps(_results()))
    assert report.main([str(path)]) == 0
    assert (tmp_path / "RESULTS.md").read_text().rstrip().endswith("greedy tokens identical 63/64")
    assert capsys.readouterr().out.startswith("summary: ")


def test_a_run_under_another_name_leaves_results_md_alone(tmp_path):
    (tmp_path / "RESULTS.md").write_text("the default command's page\n")
    path = tmp_path / "ab_2026.json"
    path.write_text(json.dumps(_results()))
    assert report.main([str(path)]) == 0
    assert (tmp_path / "RESULTS.md").read_text() == "the default command's page\n"
    assert (tmp_path / "ab_2026.md").read_text().rstrip().endswith("greedy tokens identical 63/64")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RESULTS.md", "ab_2026.json", "ab_2026.md"]


def test_the_report_shows_the_fp32_reference_where_the_run_had_one():
    res = _results()
    c = res["correctness"]
    c["reference_bf16_vs_fp32"] = dict(max_abs_err=0.05, argmax_match=60, generated=64,
                                       mismatches=[dict(step=30, fp32=7, bf16=8, fp32_top2_margin=0.002)])
    c["variants"]["pipelink_lr"]["fp32"] = dict(max_abs_err=0.12, argmax_match=61, generated=64)
    section = report.render(res).split("## Correctness")[1].split("##")[0]
    assert "| max abs error vs fp32 | tokens match fp32 |" in section
    assert "| 63/64 | 0.12 | 61/64 | step 40:" in section
    assert "the bf16 reference itself matches its greedy tokens 60/64 times" in section
    assert "step 30: fp32 7, bf16 8, fp32 top-2 margin 0.002" in section
    assert report.summary_line(res) == report.summary_line(_results())  # the summary stays against the bf16 one
    plain = report.render(_results()).split("## Correctness")[1].split("##")[0]
    assert "fp32" not in plain  # a run without it (or an older JSON) renders as before


def test_a_run_merged_in_keeps_its_command_date_and_machine(tmp_path):
    path, other = tmp_path / "decode.json", tmp_path / "torch_graph.json"
    path.write_text(json.dumps(_results()))
    graph = {"command": "run.py --variants torch_graph", "date": "2026-12-04T06:10:12+00:00", "machine": "H200 b",
             "latency": [{"variant": "torch_graph", "B": 1, "ctx": 1024, "median_us": 2500.0}]}
    other.write_text(json.dumps(graph))
    assert report.main([str(path), str(other)]) == 0
    md = (tmp_path / "RESULTS.md").read_text()
    assert "Merged in from a run of its own: `run.py --variants torch_graph` (2026-12-04T06:10:12+00:00, H200 b)." in md
    assert f"Command: `{_results()['command']}`" in md  # the main run's command stays its own


def test_the_ring_control_swaps_the_same_gemvs_as_the_ring_step():
    import json
    ring = json.loads((CASE / "pipelines" / "decode_step_ring.json").read_text())
    swapped = {c["component"] for c in ring["calls"] if c.get("component", "").endswith("_ring")}
    assert {names[0] for names in kernels.RING_UNITS.values()} == swapped
    assert set(kernels.RING_UNITS) <= set(kernels.PART_UNITS)


def test_the_loader_ring_control_swaps_the_same_gemvs_and_binds_their_packed_w():
    """parts_lr_graph launches the loader-ring step's GEMVs as separate kernels: the same components, and each of
    their calls takes the W the step binds (PACKED_W: the tensor decode_step_lr.json binds to that call's `w`)."""
    import json
    lr = json.loads((CASE / "pipelines" / "decode_step_lr.json").read_text())
    swapped = {c["component"] for c in lr["calls"] if c.get("component", "").endswith("_lr")}
    assert {names[0] for names in kernels.LR_UNITS.values()} == swapped
    assert set(kernels.LR_UNITS) <= set(kernels.PART_UNITS)
    step_call = {"lm_head": "head"}  # the step's call names where the separate kernels' schedule says otherwise
    bound = {step_call.get(c["name"], c["name"]): c["bind"]["w"] for c in lr["calls"]
             if c.get("component", "").endswith("_lr")}
    assert bound == kernels.PACKED_W
    swapped_calls = {call for unit, _, call in kernels.parts_schedule(2) if unit in kernels.LR_UNITS}
    assert swapped_calls == set(kernels.PACKED_W)



# --- contract values as an experiment (run.py --values) -----------------------------------------------------

def test_a_value_set_names_components_and_values_they_provide():
    import decode_parts as parts
    vs = parts.parse_value_set("qkv8:qkv_rope_normed.QKV_ROWS=8,attn_split.SPLIT_MIN_L=128")
    assert vs.name == "qkv8" and vs.values == (("qkv_rope_normed", "QKV_ROWS", 8), ("attn_split", "SPLIT_MIN_L", 128))
    assert vs.components() == ["attn_split", "qkv_rope_normed"]
    for bad, says in (("qkv8", "expected NAME:"), ("a b:attn_split.SPLIT_MIN_L=1", "expected NAME:"),
                      ("x:attn_split=1", "component.KEY=VALUE"), ("x:nobody.K=1", "no component 'nobody'"),
                      ("x:attn_split.SPLIT_MIN_L=big", "not an integer"),
                      ("x:attn_split.QKV_ROWS=8", "attn_split provides no QKV_ROWS")):
        with pytest.raises(ValueError, match=says):
            parts.parse_value_set(bad)


def test_with_values_copies_and_leaves_the_contract_alone():
    import decode_parts as parts
    doc = {"geometry": {"provides": {"A": 1, "B": {"default": 2, "min": 1}}}}
    out = parts.with_values(doc, {"A": 3, "B": 4}, "c")
    assert out["geometry"]["provides"] == {"A": 3, "B": {"default": 4, "min": 1}}
    assert doc["geometry"]["provides"] == {"A": 1, "B": {"default": 2, "min": 1}}


def _decode_run():
    """The case study's run.py by its path: other case studies have a run.py too."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("llama_decode_run", CASE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_refuses_a_bad_value_set_as_a_usage_error(capsys):
    run = _decode_run()
    with pytest.raises(SystemExit) as exc:
        run.main(["--values", "x:attn_split.NOPE=1"])
    assert exc.value.code == 2 and "attn_split provides no NOPE" in capsys.readouterr().err


def test_the_report_compares_each_value_set_with_the_files_values():
    res = _results()
    res["value_sets"] = {"minl128": [["attn_split", "SPLIT_MIN_L", 128]]}
    res["latency"] = res["latency"] + [dict(r, variant="pipelink_split@minl128", median_us=r["median_us"] * 0.9)
                                       for r in res["latency"] if r["variant"] == "pipelink_split"]
    md = report.render(res)
    section = md.split("## Contract values tried")[1].split("##")[0]
    assert "`minl128`: attn_split.SPLIT_MIN_L = 128" in section and "| 1 | 1024 | 0.900 |" in section
    assert report.summary_line(res) == report.summary_line(_results())  # the summary is the files' values'


def test_a_value_set_builds_the_component_with_its_values(tmp_path):
    import decode_parts as parts
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.formats.inputs import read_input
    vs = parts.parse_value_set("m:attn_split.SPLIT_MIN_L=256")
    objects = parts.build_value_set(tmp_path, vs, {"attn_merge": Path("/unchanged.o")})
    assert objects["attn_merge"] == Path("/unchanged.o") and objects["attn_split"].parent == tmp_path
    (obj,) = read_input(objects["attn_split"], DiagnosticSink())
    assert json.loads(obj.embedded_contract)["geometry"]["provides"]["SPLIT_MIN_L"] == 256
    assert json.loads((CASE / "attention" / "attn_split.json").read_text())["geometry"]["provides"]["SPLIT_MIN_L"] != 256


def test_run_refuses_an_unknown_variant(capsys):
    run = _decode_run()
    with pytest.raises(SystemExit) as exc:
        run.main(["--variants", "pipelink_splt"])
    assert exc.value.code == 2 and "pipelink_splt" in capsys.readouterr().err
    assert set(run.DEFAULT_VARIANTS) <= set(run.PIPELINK_VARIANTS + run.TORCH_VARIANTS)


@pytest.mark.parametrize("arg", ["head", "1x:/tmp", "head:/no/such/folder"])
def test_run_refuses_a_bad_objects_folder_as_a_usage_error(capsys, arg):
    run = _decode_run()
    with pytest.raises(SystemExit) as exc:
        run.main(["--objects", arg])
    assert exc.value.code == 2 and "NAME:DIR" in capsys.readouterr().err


def test_without_a_gpu_run_links_the_variants_and_says_what_they_launch(monkeypatch, capsys):
    run = _decode_run()
    monkeypatch.setattr(run, "gpu_present", lambda: False)
    assert run.main(["--variants", "pipelink_split", "torch_graph"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "pipelink_split: kernel decode_step, 256 threads," in text and "B frame" in text
    assert "no GPU here" in text


@pytest.mark.parametrize("raised, traceback_shown", [("link", False), ("fault", True)])
def test_a_variant_the_linker_refuses_is_reported_by_its_diagnostics_alone(monkeypatch, capsys, raised, traceback_shown):
    """A variant that does not link (a ring too large for shared memory, PL042) is an answer about the inputs: the
    run names it with the linker's diagnostics and goes on, no traceback; any other failure keeps its traceback."""
    run = _decode_run()

    def refuse(objects, variant, pipelines=None, load=True):
        if raised == "link":
            raise kernels.LinkFailed("linking decode_step_lr.json failed:\nerror[PL042]: the fused kernel needs more")
        raise ValueError("a fault of the script")

    monkeypatch.setattr(kernels, "MegaStep", refuse)
    errors = {}
    assert run.load_variants({}, ["pipelink_lr_s9"], errors, load=False) == {}
    out = capsys.readouterr()
    assert "pipelink_lr_s9" in errors and "pipelink_lr_s9: not available" in out.out
    assert ("Traceback" in out.err) == traceback_shown
    assert ("PL042" in errors["pipelink_lr_s9"]) == (raised == "link")


# --- the rule to ship a change, set before the run ------------------------------------------------------

def _ab(rows: dict) -> dict:
    """A run's latency rows from {variant: {(B, ctx): us}}."""
    return {"latency": [{"variant": v, "B": B, "ctx": ctx, "median_us": us}
                        for v, sizes in rows.items() for (B, ctx), us in sizes.items()]}


def test_a_variant_ships_only_faster_at_the_headline_and_nowhere_much_slower():
    base = {(1, 1024): 1000.0, (8, 4096): 2000.0}
    run = _ab({"pipelink_lr": base,
               "pipelink_lr_good": {(1, 1024): 995.0, (8, 4096): 2006.0},     # 0.5% faster, 0.3% slower: ships
               "pipelink_lr_small": {(1, 1024): 995.1, (8, 4096): 1900.0},    # short of 0.5% at the headline
               "pipelink_lr_costly": {(1, 1024): 900.0, (8, 4096): 2006.2},   # over 0.3% slower elsewhere
               "pipelink_lr_partial": {(1, 1024): 900.0},                     # not at every size: not judged
               "pipelink_split": {(1, 1024): 900.0, (8, 4096): 1000.0}})      # another pipeline, not a variant
    got = {v.variant: (v.ships, round(100 * v.faster[(1, 1024)], 2)) for v in report.verdicts(run)}
    assert got == {"pipelink_lr_good": (True, 0.5), "pipelink_lr_small": (False, 0.49),
                   "pipelink_lr_costly": (False, 10.0)}
    md = report.render(run)
    table = md.split("## Against `pipelink_lr`")[1].split("##")[0]
    assert "| `pipelink_lr_good` | +0.50% | -0.30% | yes |" in table, table
    assert "pipelink_split" not in table and "pipelink_lr_partial" not in table
    # without the headline size nothing ships; without variants, no section
    elsewhere = _ab({"pipelink_lr": {(8, 4096): 2000.0}, "pipelink_lr_fast": {(8, 4096): 1000.0}})
    assert [v.ships for v in report.verdicts(elsewhere)] == [False]
    assert "## Against" not in report.render(_ab({"pipelink_lr": base, "pipelink_split": base}))


@pytest.mark.parametrize("run,shipping", [("knobs_ab_h100_2026-12-06.json", ["pipelink_lr_s5"]),
                                          ("gap_hn_ab_h100_2026-12-06.json", [])])
def test_the_committed_a_b_runs_decide_as_they_were_decided(run, shipping):
    """The fifth slot shipped on the rule; the paced L2 asks and the normed head did not (PERFORMANCE.md)."""
    results = json.loads((CASE / "results" / run).read_text())
    assert [v.variant for v in report.verdicts(results) if v.ships] == shipping


def test_the_report_prints_each_variants_verdict(tmp_path, capsys):
    path = tmp_path / "ab.json"
    path.write_text(json.dumps(_ab({"pipelink_lr": {(1, 1024): 1000.0}, "pipelink_lr_x": {(1, 1024): 990.0}})))
    assert report.main([str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["pipelink_lr_x: ships by the rule (B = 1, ctx 1024: +1.00%)"]
