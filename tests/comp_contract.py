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


def build_elsewhere(folder, contract_path, source: str):
    """A component as a team building it with its own nvcc ships it (`pipelink config --cflags`, the generated
    header beside the source, a sidecar contract): no build record in it. Returns the object's path."""
    import subprocess
    from pathlib import Path

    from pipelink import toolchain
    from pipelink.authoring.builder import component_cflags, gencode
    from pipelink.authoring.header import generate_header
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_file
    folder, contract_path = Path(folder), Path(contract_path)
    c = load_contract_file(contract_path, DiagnosticSink())
    (folder / f"{c.name}.pipelink.h").write_text(generate_header(c))
    (folder / f"{c.name}.cu").write_text(source)
    obj = folder / f"{c.name}.o"
    proc = subprocess.run([str(toolchain.nvcc_path()), "-dc", "-std=c++17", "-O3", gencode("sm_90"),
                           *component_cflags(), f"-I{folder}", str(folder / f"{c.name}.cu"), "-o", str(obj)],
                          capture_output=True, text=True, env=toolchain.nvcc_env())
    assert proc.returncode == 0, proc.stderr
    (folder / f"{c.name}.o.contract.json").write_text(contract_path.read_text())
    return obj
