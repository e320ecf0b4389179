"""A valid contract to mutate in tests."""
import copy
import json


def base_contract(**overrides) -> dict:
    c = {
        "pipelink_contract": 1,
        "name": "comp",
        "version": "1.0.0",
        "owner": "team",
        "entry": {"symbol": "comp_entry", "params": [
            {"name": "x", "dtype": "f32", "pointer": True, "const": True},
            {"name": "topk", "dtype": "i32", "pointer": True, "shape": ["M", 8]},
            {"name": "M", "dtype": "i32"}]},
        "targets": {"archs": ["sm_90"], "compile_flags": {"ftz": False, "prec_div": True, "prec_sqrt": True,
                                                          "fmad": True}},
        "threads": {"warps": 8, "roles": [{"name": "producer", "warps": 4, "warpgroup_aligned": True},
                                          {"name": "consumer", "warps": 4}]},
        "registers": {"max_per_thread": 64},
        "smem": {"buffers": [{"name": "stage", "bytes": "TILE_M * 128 * 4", "align": 128},
                             {"name": "temp", "bytes": 256, "lifetime": "scratch", "phase": "epilogue"}]},
        "barriers": {"named": [{"name": "ready", "threads": 256}], "mbarriers": [{"name": "full", "arrivals": 1}],
                     "hardcoded_ids": [3]},
        "ports": [{"name": "x", "direction": "in", "space": "gmem", "dtype": "f32", "param": "x",
                   "tile": ["TILE_M", 128]},
                  {"name": "out", "direction": "out", "dtype": "f32", "tile": ["TILE_M", 128], "stages": 2}],
        "geometry": {"provides": {"TILE_M": 64},
                     "consumes": {"TILE_N": {"min": 32, "max": 256, "multiple_of": 32, "default": 128}},
                     "tile_sequence": {"grid": ["ceil_div(M, TILE_M)"], "order": "row_major",
                                       "distribution": "grid_stride"}},
        "events": {"notifies": [{"name": "done", "map": "i->i", "shape": ["ceil_div(M, TILE_M)"]}],
                   "waits": [{"name": "routed", "map": "i->topk[i,:]", "count": "auto"}]},
    }
    c = copy.deepcopy(c)
    c.update(overrides)
    return c


def dumps(c) -> bytes:
    return json.dumps(c, indent=2).encode()


def shipped_component(name, edit=None):
    """A shipped component's contract (optionally edited), without its object: for pure tests."""
    from pathlib import Path

    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_bytes
    from pipelink.core.model import Component
    from pipelink.core.model import Source

    raw = json.loads((Path(__file__).resolve().parent.parent / "contracts" / f"{name}.json").read_text())
    if edit:
        edit(raw)
    sink = DiagnosticSink()
    c = load_contract_bytes(json.dumps(raw).encode(), Source(f"{name}.json"), sink)
    assert c is not None, [d.render() for d in sink.items]
    return Component(c, None)
