"""Run the reduce-scatter stand-in of tests/test_distributed_events.py on every rank: one process per GPU under
torchrun, or a world of one alone. argv: tp_partial.o rs_reduce.o pipeline.json TM TN [--starve R]. Each rank
checks its owned rows of `out` (the sum of every rank's partial, 1 + 2 + ... + WORLD) and that the rows it
does not own stay poisoned; launched twice. Prints 'tp_rs: ok' per rank.

--starve R: rank R never launches (it only joins the barrier that follows a launch); the others run a debug
build (the pipeline's debug_events), whose waits for R's partials give up and report: each of them must
raise EventTimeout naming rs_reduce's wait on 'tiles'. Prints 'tp_rs: starved ok' per rank."""
import ctypes
import json
import math
import os
import sys

import pipelink
from pipelink.runtime import driver as cu
from pipelink.runtime import nvshmem


def main() -> None:
    partial, reduce, pipeline, TM, TN = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    starve = int(sys.argv[sys.argv.index("--starve") + 1]) if "--starve" in sys.argv else None
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if "WORLD_SIZE" in os.environ:  # under torchrun: the unique id travels over a CPU process group
        import torch
        import torch.distributed as dist
        torch.cuda.set_device(local)
        dist.init_process_group("gloo")
        nvshmem.init_from_torch(device=local)
    else:
        nvshmem.init(0, 1, None, local)
    rank, world = nvshmem.rank(), nvshmem.world()
    spec = json.loads(open(pipeline).read())
    if starve is not None:
        spec["debug_events"] = True
    linked = pipelink.link([partial, reduce], pipeline=spec)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    kernel = linked.kernel(local)
    parts = nvshmem.symmetric((world, TM, TN), "f32")
    out = nvshmem.symmetric((TM, TN), "f32")
    drv = cu.driver()
    rows = math.ceil(TM / world)
    owned = range(rank * rows, min(TM, (rank + 1) * rows))
    want = world * (world + 1) / 2
    if starve is not None:
        from pipelink.runtime.workspace import EventTimeout
        if rank == starve:
            kernel.prepare(parts=parts, out=out, TM=TM, TN=TN)  # its share of the collective workspace allocation
            nvshmem.barrier_on_stream(0)  # the barrier the others' launch ends with; no launch
            cu.call("cuCtxSynchronize", drv.cuCtxSynchronize)
        else:
            try:
                kernel.launch(parts=parts, out=out, TM=TM, TN=TN)
            except EventTimeout as e:
                assert (e.component, e.event) == ("rs_reduce", "tiles") and e.observed < e.expected, str(e)
            else:
                raise AssertionError(f"rank {rank}: no wait reported rank {starve}'s missing partials")
        kernel.unload()
        nvshmem.finalize()
        print(f"tp_rs: starved ok (rank {rank} of {world})", flush=True)
        return
    for launch in range(2):
        cu.call("cuMemsetD32", drv.cuMemsetD32, out.ptr, 0x7FC00000, TM * TN)  # NaN: an unwritten tile fails
        nvshmem.barrier()
        kernel.launch(parts=parts, out=out, TM=TM, TN=TN)
        cu.call("cuCtxSynchronize", drv.cuCtxSynchronize)
        host = (ctypes.c_float * (TM * TN))()
        cu.call("cuMemcpyDtoH", drv.cuMemcpyDtoH, ctypes.addressof(host), out.ptr, TM * TN * 4)
        bad = [(m, n, host[m * TN + n]) for m in range(TM) for n in range(TN)
               if (m in owned and host[m * TN + n] != want) or (m not in owned and host[m * TN + n] == host[m * TN + n])]
        assert not bad, f"rank {rank} of {world}, launch {launch}: {len(bad)} tiles wrong, first {bad[:6]} (owned rows {owned.start}..{owned.stop - 1} want {want}, the others NaN)"
    kernel.unload()
    parts.free()
    out.free()
    nvshmem.finalize()
    print(f"tp_rs: ok (rank {rank} of {world})", flush=True)


if __name__ == "__main__":
    main()
