"""Does the decode megakernel need L1? The same linked step (decode_step.json) launched with its own shared
memory, with more dynamic shared memory than it uses (the same two CTAs an SM, less L1 left), and with the
carveout preference at all-shared, timed alternating as run.py times its variants (B = 1 and 8).

    python case_studies/llama32_1b_decode/l1_probe.py      # on a GPU; writes $OUT/l1_probe.json (or /tmp)
"""
import json, sys, tempfile, os
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE)); sys.path.insert(0, str(HERE.parent.parent))
import run
from decode_model import DecodeModel, build_reference
from decode_kernels import MegaStep, build_objects
from pipelink.runtime import driver as _cu

model = build_reference(0, None)
dm = DecodeModel.from_hf(model)
objects = build_objects(Path(tempfile.mkdtemp()))

def with_smem(step, nbytes=None, carveout=None):
    k = step.kernel
    drv = _cu.driver()
    if nbytes is not None:
        k.dynamic_smem = nbytes
        k._configure()
    if carveout is not None:
        _cu.call("carveout", drv.cuFuncSetAttribute, k.function,
                 drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout)
    k._resident = None
    print(step.variant, nbytes, carveout, "blocks/SM", k.max_active_blocks_per_sm(), flush=True)
    return step

variants = {"base": with_smem(MegaStep(objects, "split")),
            "smem70k": with_smem(MegaStep(objects, "split"), 70 * 1024),
            "smem104k": with_smem(MegaStep(objects, "split"), 104 * 1024),
            "carve100": with_smem(MegaStep(objects, "split"), None, 100)}
errors = {}
rows = []
for B, ctx in ((1, 1024), (8, 4096), (1, 4096)):
    rows += run.bench_config(model, dm, variants, B, ctx, 10, 100, [], errors)
out = dict(command="python case_studies/llama32_1b_decode/l1_probe.py", machine=run.machine(), rows=rows, errors=errors)
Path(os.environ.get("OUT", "/tmp"), "l1_probe.json").write_text(json.dumps(out, indent=1))
print(json.dumps(errors))
