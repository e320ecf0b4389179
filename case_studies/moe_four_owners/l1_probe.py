"""Does the Hopper MoE layer lose by its small L1? Its fused kernel (221 KB of shared memory a block: 28 KB of
L1 left), its separate-kernel graph (each kernel its own shared memory), and that graph with every kernel's
carveout preference at all-shared (the L1 the router, dispatch, merge and combine get inside the fused
kernel), each checked against the fp32 reference, then timed alternating (qwen3-30b-a3b, T in 16..4096).

    python case_studies/moe_four_owners/l1_probe.py      # on a GPU
"""
import os, sys, tempfile
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE)); sys.path.insert(0, str(HERE.parent.parent))
import ab, builds, layer, launchers
from pipelink.runtime import driver as _cu

out = Path(tempfile.mkdtemp())
base = builds.build_all(out / "base", classic=False)
objs = builds.build_hopper(out / "hopper", base)
fused = builds.link_hopper(objs)
assert fused.ok, [d.render() for d in fused.diagnostics]
print("fused smem", fused.manifest.dynamic_smem, "regs", fused.manifest.resources.registers, flush=True)
sep_a = builds.link_separate(objs, fused.manifest.geometry)
sep_b = builds.link_separate(objs, fused.manifest.geometry)
drv = _cu.driver()
def carve(kernels, pct):
    for k in kernels:
        _cu.call("carveout", drv.cuFuncSetAttribute, k.function,
                 drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, pct)
        print(k.name, "smem", k.dynamic_smem, "blocks/SM", k.max_active_blocks_per_sm(), flush=True)
    return kernels
ka = [r.kernel() for r in sep_a]
kb = carve([r.kernel() for r in sep_b], 100)
impls = {"fused": launchers.PipelinkLayer.from_link(fused),
         "separate graph": launchers.CapturedLayer(launchers.PipelinkSeparate(ka)),
         "separate graph, min L1": launchers.CapturedLayer(launchers.PipelinkSeparate(kb))}
shape = layer.SHAPES["qwen3-30b-a3b"]
ab.compare(impls, shape, layer.make_weights(shape, int.from_bytes(os.urandom(2), "little")), rounds=6)
