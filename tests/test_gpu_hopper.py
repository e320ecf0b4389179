"""The CUTLASS mainloop with each epilogue, linked and run on a GPU against an fp32 reference.

Built once per session (the mainloop takes 40-90 s to compile). Fresh random inputs every run (seed
in the failure message), outputs poisoned with NaN, ragged shapes, one CTA walking many tiles (the
pipeline position carried across tiles; the two ping-pong instances taking turns), and a watchdog:
a launch that does not finish is a failure, not a stalled run.
"""
import os
import time
from pathlib import Path

import pytest

from pipelink.authoring.builder import build_component, cutlass_include_dir
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_file
from pipelink.core.pipeline import PipelineSpec
from pipelink.linker.passes import LinkOptions, link

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parent.parent
MAINLOOPS = ("hopper_gemm_128x128", "hopper_gemm_64x128")
EPILOGUES = ("epi_store_bf16", "epi_swiglu", "epi_bias_residual")


@pytest.fixture(scope="session")
def hopper_objects(tmp_path_factory):
    if cutlass_include_dir() is None:
        pytest.skip("the CUTLASS headers (nvidia-cutlass wheel) are not installed")
    out = tmp_path_factory.mktemp("hopper")
    objects = {}
    for name in MAINLOOPS + EPILOGUES:
        source = "hopper_gemm" if name.startswith("hopper_gemm") else name
        path = REPO / "contracts" / f"{name}.json"
        sink = DiagnosticSink()
        contract = load_contract_file(path, sink)
        ok = build_component(contract, path.read_bytes(), REPO / "components" / source / f"{source}.cu",
                             out / f"{name}.o", sink)
        assert ok, [d.render() for d in sink.items]
        objects[name] = str(out / f"{name}.o")
    return objects


def _finish(torch, what: str, seconds: float = 20.0) -> None:
    done = torch.cuda.Event()
    done.record()
    start = time.time()
    while not done.query():
        if time.time() - start > seconds:
            os._exit(f"{what}: still running after {seconds} s (a hang)")  # the context is lost: end here
        time.sleep(0.001)


@pytest.mark.parametrize("mainloop", MAINLOOPS)
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("M, N, K, grid", [(128, 256, 64, 1), (300, 1024, 640, 1), (300, 1024, 640, None),
                                           (16, 4096, 1024, None), (1000, 2048, 256, 7),
                                           (16, 512, 8192, None), (256, 1024, 4096, None), (256, 1024, 4096, 5)])
def test_mainloop_with_epilogue_matches_fp32(hopper_objects, mainloop, epilogue, M, N, K, grid):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    result = link([hopper_objects[mainloop], hopper_objects[epilogue]],
                  LinkOptions(pipeline=PipelineSpec(name=f"k_{mainloop}_{epilogue}", components=(mainloop, epilogue))))
    assert result.ok, [d.render() for d in result.diagnostics]
    kernel = result.kernel()
    dev = torch.device("cuda")
    x = torch.randn(M, K, device=dev).bfloat16()
    w = (torch.randn(N, K, device=dev) / K ** 0.5).bfloat16()
    ref = x.float() @ w.float().T
    if epilogue == "epi_store_bf16":
        out = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
        args = dict(a=x, b=w, M=M, N=N, K=K, d=out)
    elif epilogue == "epi_swiglu":
        out = torch.full((M, N // 2), float("nan"), device=dev, dtype=torch.bfloat16)
        args = dict(a=x, b=w, M=M, N=N, K=K, h=out)
        ref = F.silu(ref[:, 0::2]) * ref[:, 1::2]
    else:
        bias, res = torch.randn(N, device=dev).bfloat16(), torch.randn(M, N, device=dev).bfloat16()
        out = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
        args = dict(a=x, b=w, M=M, N=N, K=K, y=out, bias=bias, residual=res)
        ref = ref + bias.float() + res.float()
    for launch, split in enumerate((True, True, False)):  # a second launch needs no reset; whole tiles too
        kernel.split_reduction = split
        out.fill_(float("nan"))
        kernel.launch(grid=grid, **args)
        _finish(torch, f"{mainloop} + {epilogue} M={M} N={N} K={K} grid={grid}")
        torch.cuda.synchronize()
        assert torch.isfinite(out.float()).all(), f"unwritten outputs (seed {seed}, launch {launch})"
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, f"max error {err:.3g} of the output's scale (seed {seed}, launch {launch})"
