"""Build the tensor-parallel GEMM + reduce-scatter case study: the collective team's epilogue
(collective/epi_rs_owner.cu, against NVSHMEM's headers) and the mainloop team's CUTLASS GEMM (components/
hopper_gemm, one contract per tile shape), then link one kernel per tile shape (pipelines/tp_rs_*.json) into
build/ (LinkResult.save: cubin, manifest, link map). No GPU needed.

    python case_studies/tp_gemm_rs/build.py
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import pipelink  # noqa: E402
from pipelink import PipelinkError, toolchain  # noqa: E402

BUILD = HERE / "build"
TILES = ("128x128", "128x256", "64x128")
# component -> (contract, source)
COMPONENTS = {
    **{f"hopper_gemm_{t}": (ROOT / "contracts" / f"hopper_gemm_{t}.json", ROOT / "components" / "hopper_gemm" / "hopper_gemm.cu")
       for t in TILES},
    "epi_rs_owner": (HERE / "collective" / "epi_rs_owner.json", HERE / "collective" / "epi_rs_owner.cu"),
}


def build_one(name: str) -> float:
    contract, source = COMPONENTS[name]
    # the epilogue calls NVSHMEM (nvshmem_ptr, nvshmemx_signal_op): its headers, the pinned release
    include = [str(toolchain.nvshmem_root() / "include")] if name == "epi_rs_owner" else []
    start = time.perf_counter()
    pipelink.build(source, contract, BUILD / f"{name}.o", include_dirs=include)
    return time.perf_counter() - start


def link_one(tile: str):
    spec = json.loads((HERE / "pipelines" / f"tp_rs_{tile}.json").read_text())
    return pipelink.link([str(BUILD / f"{c}.o") for c in spec["components"]], pipeline=spec, raise_on_error=True)


def main() -> None:
    BUILD.mkdir(exist_ok=True)
    try:
        run()
    except PipelinkError as exc:  # the diagnostics, located, as the CLI prints them
        print(exc, file=sys.stderr)
        sys.exit(1)


def run() -> None:
    for name in COMPONENTS:
        print(f"built {name}.o in {build_one(name):.1f} s", flush=True)
    for tile in TILES:
        result = link_one(tile)
        result.save(BUILD)  # tp_rs_<tile>.cubin, .json (the manifest), .map: all or none
        m = result.manifest
        print(f"linked {m.kernel}: {m.block[0]} threads, {m.dynamic_smem} B smem, {m.resources.registers} registers, "
              f"frame {m.resources.frame_bytes} B, distributed {m.distributed}")


if __name__ == "__main__":
    main()
