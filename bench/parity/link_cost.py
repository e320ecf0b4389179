"""Link cost on this machine (no GPU needed): for each shipped pipeline, wall time of
  - a cold `pipelink link` (cache off),
  - `pipelink link` on a cache hit,
  - relinking after one component changed: `pipelink build` of that component, then a cold link,
  - against rebuilding the one-unit control with nvcc (`nvcc -cubin` of the `--emit-monolithic` source).
Each is the median of REPS runs of the command line a user would type.

    python bench/parity/link_cost.py [--reps 5] [--out bench/parity]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelink import toolchain
from pipelink.authoring.builder import pipelink_include_dir
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.harness.shipped import REPO, build_shipped, shipped_pipelines

PIPELINK = [sys.executable, "-m", "pipelink.cli"]


def timed(cmd, env=None, reps=5) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - start)
        if proc.returncode:
            sys.exit(f"{' '.join(map(str, cmd))} failed:\n{proc.stderr}")
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "parity"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pipelink-cost-"))
    objects = {o.stem: str(o) for o in build_shipped(tmp / "objects", DiagnosticSink(), log=lambda *_: None)}
    env = dict(os.environ, PIPELINK_CACHE_DIR=str(tmp / "cache"))
    rows = []
    for pipe in shipped_pipelines():
        files = [objects[n] for n in pipe.components]
        base = PIPELINK + ["link", "--pipeline", str(pipe.path), *files, "-o", str(tmp / f"{pipe.name}.cubin")]
        cold = timed(base + ["--no-cache"], env, args.reps)
        subprocess.run(base, env=env, capture_output=True)  # fill the cache
        hit = timed(base, env, args.reps)
        # one component changes: its team rebuilds it, then the kernel is relinked
        changed = pipe.components[-1]
        src = tmp / f"{changed}.cu"
        src.write_text((REPO / "components" / changed / f"{changed}.cu").read_text() + "\n// changed\n")
        build = PIPELINK + ["build", str(src), "--contract", str(REPO / "contracts" / f"{changed}.json"),
                            "-o", str(tmp / f"{changed}.o"), "--arch", "sm_90"]
        rebuilt = [str(tmp / f"{changed}.o") if n == changed else objects[n] for n in pipe.components]
        relink = PIPELINK + ["link", "--pipeline", str(pipe.path), *rebuilt, "-o", str(tmp / "re.cubin"), "--no-cache"]
        t_build, t_relink = timed(build, env, args.reps), timed(relink, env, args.reps)
        mono = tmp / f"{pipe.name}_one_unit.cu"
        subprocess.run(base + ["--no-cache", "--emit-monolithic", str(mono)], env=env, check=True, capture_output=True)
        nvcc = [str(toolchain.nvcc_path()), "-cubin", "-arch=sm_90", "-std=c++17", "-O3",
                f"-I{pipelink_include_dir()}", str(mono), "-o", str(tmp / "mono.cubin")]
        t_nvcc = timed(nvcc, dict(toolchain.nvcc_env()), args.reps)
        row = {"pipeline": pipe.name, "components": len(files), "cold_link_s": cold, "cache_hit_s": hit,
               "rebuild_one_component_s": t_build, "relink_s": t_relink, "one_unit_nvcc_s": t_nvcc}
        rows.append(row)
        print(f"{pipe.name:12} cold {cold:.2f} s, hit {hit:.2f} s, rebuild {changed} {t_build:.2f} s + relink "
              f"{t_relink:.2f} s vs one-unit nvcc {t_nvcc:.2f} s", flush=True)
    res = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
           f"{platform.processor() or platform.platform()}", "reps": args.reps,
           "command": "python bench/parity/link_cost.py " + " ".join(sys.argv[1:]), "pipelines": rows}
    out = Path(args.out)
    (out / "link_cost.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# Link cost", "", f"Machine: {res['machine']} (no GPU). Date: {res['date']}. Command: `{res['command']}`.",
             f"Wall time of each command line, median of {res['reps']} runs, Python start-up included.", "",
             "| pipeline | components | cold link (s) | cache hit (s) | rebuild one component (s) | relink (s) | "
             "rebuild + relink (s) | one-unit control with nvcc (s) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['pipeline']} | {r['components']} | {r['cold_link_s']:.2f} | {r['cache_hit_s']:.2f} | "
                     f"{r['rebuild_one_component_s']:.2f} | {r['relink_s']:.2f} | "
                     f"{r['rebuild_one_component_s'] + r['relink_s']:.2f} | {r['one_unit_nvcc_s']:.2f} |")
    (out / "LINK_COST.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
