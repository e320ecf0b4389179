"""Build the Qwen3-32B MLP case study: each team's component separately (`pipelink build`), then
every kernel of the study with `pipelink link`, into build/ (cubin + manifest per kernel).

    python case_studies/qwen3_32b_mlp/build.py [--link-cost]

--link-cost also measures what separate compilation buys here: relinking after an epilogue change
(rebuild the epilogue, link) against rebuilding the kernel as one translation unit with nvcc.
No GPU needed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from pipelink import LinkOptions, link, toolchain  # noqa: E402
from pipelink.build import BuildOptions, build_component, cutlass_include_dir, nvcc_command  # noqa: E402
from pipelink.diagnostics import DiagnosticSink  # noqa: E402
from pipelink.loader import load_contract_file  # noqa: E402
from pipelink.pipeline import load_pipeline  # noqa: E402

BUILD = HERE / "build"
# component -> (source, contract): the mainloop team ships one source with a contract per tile shape.
COMPONENTS = {
    "hopper_gemm_128x256": "hopper_gemm", "hopper_gemm_128x128": "hopper_gemm", "hopper_gemm_64x128": "hopper_gemm",
    "epi_store_bf16": "epi_store_bf16", "epi_swiglu": "epi_swiglu", "epi_bias_residual": "epi_bias_residual",
}
TILES = ("128x256", "128x128", "64x128")
KERNELS = [f"{kind}_{tile}" for kind in ("swiglu", "plain", "residual") for tile in TILES]


def fail(sink: DiagnosticSink) -> None:
    for d in sink.items:
        print(d.render(), file=sys.stderr)
    sys.exit(1)


def build_one(name: str) -> float:
    sink = DiagnosticSink()
    path = ROOT / "contracts" / f"{name}.json"
    contract = load_contract_file(path, sink)
    if contract is None:
        fail(sink)
    src = ROOT / "components" / COMPONENTS[name] / f"{COMPONENTS[name]}.cu"
    start = time.perf_counter()
    if not build_component(contract, path.read_bytes(), src, BUILD / f"{name}.o", sink):
        fail(sink)
    return time.perf_counter() - start


def link_one(kernel: str, monolithic: bool = False):
    sink = DiagnosticSink()
    spec = load_pipeline(str(HERE / "pipelines" / f"{kernel}.json"), sink)
    if spec is None:
        fail(sink)
    objs = [str(BUILD / f"{c}.o") for c in spec.components]
    start = time.perf_counter()
    result = link(objs, LinkOptions(pipeline=spec, monolithic=monolithic, cache=False))
    seconds = time.perf_counter() - start
    if not result.ok:
        for d in result.diagnostics:
            print(d.render(), file=sys.stderr)
        sys.exit(1)
    return result, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--link-cost", action="store_true", help="also time relink vs one-unit rebuild")
    ap.add_argument("--link-only", action="store_true", help="relink the kernels from the objects in build/")
    args = ap.parse_args()
    BUILD.mkdir(exist_ok=True)
    if not args.link_only:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            times = dict(zip(COMPONENTS, pool.map(build_one, COMPONENTS)))
        for name, s in times.items():
            print(f"built {name}.o in {s:.1f} s")
    for kernel in KERNELS:
        result, s = link_one(kernel)
        (BUILD / f"{kernel}.cubin").write_bytes(result.cubin)
        (BUILD / f"{kernel}.json").write_text(json.dumps(result.manifest, indent=1))
        (BUILD / f"{kernel}.map").write_text(result.link_map)
        res = result.manifest.get("resources", {})
        print(f"linked {kernel}: {result.manifest['block'][0]} threads, {result.manifest['dynamic_smem']} B smem, "
              f"{res.get('registers')} registers at entry, {s:.2f} s")
    if args.link_cost:
        link_cost()


def link_cost() -> None:
    """Relink after an epilogue change vs one-unit rebuild (nvcc, the same flags), median of 3."""
    def median(xs):
        return sorted(xs)[len(xs) // 2]
    relink, rebuild = [], []
    for _ in range(3):
        start = time.perf_counter()
        build_one("epi_swiglu")
        link_one("swiglu_128x256")
        relink.append(time.perf_counter() - start)
    result, _ = link_one("swiglu_128x256", monolithic=True)
    unit = BUILD / "swiglu_128x256_one_unit.cu"
    unit.write_text(result.monolithic)
    sink = DiagnosticSink()
    contract = load_contract_file(ROOT / "contracts" / "hopper_gemm_128x256.json", sink)
    cmd = nvcc_command(contract, unit, BUILD / "one_unit.o", BUILD, BuildOptions())
    cmd = [c for c in cmd if not c.startswith("-DPIPELINK_HEADER")]
    for _ in range(3):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=toolchain.nvcc_env())
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            sys.exit(1)
        rebuild.append(time.perf_counter() - start)
    doc = {"relink_after_epilogue_change_s": median(relink), "one_unit_rebuild_s": median(rebuild),
           "ratio": median(relink) / median(rebuild), "samples": {"relink": relink, "rebuild": rebuild},
           "machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"), "cutlass": str(cutlass_include_dir())}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "link_cost.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"relink after an epilogue change {doc['relink_after_epilogue_change_s']:.2f} s, one-unit rebuild "
          f"{doc['one_unit_rebuild_s']:.2f} s: ratio {doc['ratio']:.3f}")


if __name__ == "__main__":
    main()
