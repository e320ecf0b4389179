"""Small role-structured contracts (the `entries` form) to mutate in tests: a mainloop with a
producer and a consumer role handing an accumulator fragment to an epilogue."""
import copy
import json

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Component
from pipelink.core.model import Source

_MAINLOOP = {
    "pipelink_contract": 1, "name": "ml", "version": "1.0.0",
    "params": [
        {"name": "a", "dtype": "bf16", "tensor_map": {"shape": ["M", "K"], "box": ["TILE_M", "TILE_K"],
                                                      "swizzle": "128B"}},
        {"name": "M", "dtype": "i32"}, {"name": "N", "dtype": "i32"}, {"name": "K", "dtype": "i32"}],
    "entries": [
        {"name": "init", "symbol": "ml_init", "role": "*", "invocation": "per_cta", "params": ["a"]},
        {"name": "load", "symbol": "ml_load", "role": "producer", "params": ["a", "K"]},
        {"name": "mma", "symbol": "ml_mma", "role": "consumer", "params": ["acc", "K"]}],
    "targets": {"archs": ["sm_90a"]},
    "threads": {"warps": 12, "roles": [{"name": "producer", "warps": 4, "setmaxnreg": 40},
                                       {"name": "consumer", "warps": 8, "setmaxnreg": 232}]},
    "smem": {"buffers": [{"name": "tiles", "bytes": "TILE_M * TILE_K * 2 * STAGES", "align": 1024},
                         {"name": "bars", "bytes": "16 * STAGES", "align": 8}]},
    "ports": [{"name": "acc", "direction": "out", "space": "reg", "dtype": "f32", "tile": ["TILE_M", "TILE_N"],
               "fragment": "sm90_gmma_acc", "role": "consumer"}],
    "geometry": {"provides": {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64, "STAGES": 4},
                 "tile_sequence": {"grid": ["ceil_div(M, TILE_M)", "ceil_div(N, TILE_N)"], "order": "grouped",
                                   "group": 8}},
}

_EPILOGUE = {
    "pipelink_contract": 1, "name": "epi", "version": "1.0.0",
    "params": [{"name": "out", "dtype": "bf16", "pointer": True}, {"name": "M", "dtype": "i32"},
               {"name": "N", "dtype": "i32"}],
    "entries": [{"name": "tile", "symbol": "epi_tile", "role": "epilogue", "params": ["acc", "out", "M", "N"]}],
    "targets": {"archs": ["sm_90a"]},
    "threads": {"warps": "TILE_M // 16", "roles": [{"name": "epilogue", "warps": "TILE_M // 16",
                                                    "warpgroup_aligned": True}]},
    "ports": [{"name": "acc", "direction": "in", "space": "reg", "dtype": "f32", "tile": ["TILE_M", "TILE_N"],
               "fragment": "sm90_gmma_acc", "role": "epilogue"}],
    "geometry": {"consumes": {"TILE_M": {"one_of": [64, 128], "default": 128},
                              "TILE_N": {"one_of": [128, 256], "default": 256}}},
}


def mainloop(edit=None) -> dict:
    c = copy.deepcopy(_MAINLOOP)
    if edit:
        edit(c)
    return c


def epilogue(edit=None) -> dict:
    c = copy.deepcopy(_EPILOGUE)
    if edit:
        edit(c)
    return c


def dumps(c) -> bytes:
    return json.dumps(c).encode()


def load(raw: dict, file: str = "c.json"):
    """(contract or None, sink)."""
    sink = DiagnosticSink()
    return load_contract_bytes(dumps(raw), Source(file), sink), sink


def component(raw: dict) -> Component:
    """A contract that must load, without an object: for pure tests of resolve, allocate and glue."""
    c, sink = load(raw, f"{raw['name']}.json")
    assert c is not None, [d.render() for d in sink.items]
    return Component(c, None)
