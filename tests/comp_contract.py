"""A contract for the helper objects of conftest.built_objects (comp_scale, no generated header)."""
import json

COMP_CONTRACT = {
    "pipelink_contract": 1, "name": "comp", "version": "1.0.0",
    "entry": {"symbol": "comp_scale", "params": [{"name": "x", "dtype": "f32", "pointer": True},
                                                  {"name": "n", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90"]},
    "threads": {"warps": 1},
}


def write_sidecar(obj_path, **changes):
    c = dict(COMP_CONTRACT, **changes)
    path = obj_path.with_name(obj_path.name + ".contract.json")
    path.write_text(json.dumps(c))
    return path
