"""Build the Qwen3-32B MLP case study: each team's component separately (`pipelink build`), then
every kernel of the study with `pipelink link`, into build/ (cubin + manifest per kernel).

    python case_studies/qwen3_32b_mlp/build.py [--link-cost]

--link-cost also measures what separate compilation buys here: relinking after an epilogue change
(rebuild the epilogue, link) against rebuilding the kernel as one translation unit with nvcc (the
one-unit control), into results/link_cost.json. No GPU needed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from pipelink.authoring.builder import build_component, cutlass_include_dir  # noqa: E402
from pipelink.core.diagnostics import DiagnosticSink  # noqa: E402
from pipelink.core.loader import load_contract_file  # noqa: E402
from pipelink.core.pipeline import load_pipeline  # noqa: E402
from pipelink.linker.monolithic import compare_text  # noqa: E402
from pipelink.linker.passes import LinkOptions, link  # noqa: E402

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


def link_one(kernel: str, monolithic: bool = False, extra: tuple = ()):
    sink = DiagnosticSink()
    spec = load_pipeline(str(HERE / "pipelines" / f"{kernel}.json"), sink)
    if spec is None:
        fail(sink)
    objs = [str(BUILD / f"{c}.o") for c in spec.components]
    start = time.perf_counter()
    result = link(objs, LinkOptions(pipeline=spec, monolithic=monolithic, cache=False), extra=extra)
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
        (BUILD / f"{kernel}.json").write_text(json.dumps(result.manifest.to_json(), indent=1))
        (BUILD / f"{kernel}.map").write_text(result.link_map)
        m = result.manifest
        print(f"linked {kernel}: {m.block[0]} threads, {m.dynamic_smem} B smem, "
              f"{m.resources.registers if m.resources else None} registers at entry, {s:.2f} s")
    if args.link_cost:
        link_cost()


def machine() -> str:
    model = ""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores{', ' + model if model else ''}, no GPU used"


def link_cost(relinks: int = 5, rebuilds: int = 3) -> None:
    """What an epilogue change costs: rebuild the epilogue (`pipelink build`) and relink the kernel,
    against rebuilding the kernel as one translation unit: the one-unit control, compiled by nvcc as
    `pipelink build` compiles components and linked by the same nvJitLink (the kernel it gives is
    byte-identical to the linked one, checked here). Medians of wall times, in this process."""
    kernel, epilogue = "swiglu_128x256", "epi_swiglu"

    def median(xs):
        return statistics.median(xs)
    relink, rebuild, builds, links = [], [], [], []
    for _ in range(relinks):
        start = time.perf_counter()
        build_one(epilogue)
        built = time.perf_counter()
        link_one(kernel)
        relink.append(time.perf_counter() - start)
        builds.append(built - start)
        links.append(time.perf_counter() - built)
    for _ in range(rebuilds):  # the link's optional `control` pass: the one-unit control, compiled and linked
        result, _ = link_one(kernel, monolithic=True, extra=("control",))  # exits with the diagnostics if it fails
        rebuild.append(dict(result.timings)["control"])
    (BUILD / f"{kernel}_one_unit.cu").write_text(result.monolithic)
    same = compare_text(result.cubin, result.context.control_cubin, kernel)
    doc = {"kernel": kernel, "changed": epilogue,
           "relink_after_epilogue_change_s": round(median(relink), 3), "one_unit_rebuild_s": round(median(rebuild), 3),
           "ratio": round(median(relink) / median(rebuild), 4), "target_ratio": 0.1,
           "epilogue_build_s": round(median(builds), 3), "link_s": round(median(links), 3),
           "samples_s": {"relink": [round(x, 3) for x in relink], "rebuild": [round(x, 3) for x in rebuild]},
           "relink": f"`pipelink build` of {epilogue} (nvcc) + `pipelink link` of {kernel} (NVRTC glue, nvJitLink LTO)",
           "rebuild": "nvcc (device code only, as `pipelink build`) of the one-unit source with the components' flags "
                      "+ the same nvJitLink link",
           "same_text": same, "machine": machine(), "date": time.strftime("%Y-%m-%d"),
           "command": "python case_studies/qwen3_32b_mlp/build.py --link-cost",
           "cutlass": cutlass_version()}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "link_cost.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"relink after an epilogue change {doc['relink_after_epilogue_change_s']:.2f} s, one-unit rebuild "
          f"{doc['one_unit_rebuild_s']:.2f} s: ratio {doc['ratio']:.3f} ({machine()}); kernel .text "
          f"{'identical' if same['identical'] else 'DIFFERENT'} ({same['linked_bytes']} B)")


def cutlass_version() -> str:
    try:
        from importlib.metadata import version
        return f"nvidia-cutlass {version('nvidia-cutlass')}"
    except Exception:  # metadata missing: the headers' folder says where they came from
        return str(cutlass_include_dir())


if __name__ == "__main__":
    main()
