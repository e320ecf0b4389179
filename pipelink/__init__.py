"""pipelink: a contract-guided linker for fused GPU kernels.

    import pipelink
    result = pipelink.link(["tile_load.o", "tile_transform.o", "block_rowsum.o"], pipeline="rowsum.json")
    result.save("out")                # out/K.cubin, out/K.json, out/K.map
    kernel = result.kernel()          # needs a GPU; or pipelink.load("out")
    kernel.launch(x=x, out=out, M=M, N=N, scale=0.5)

`check`, `build`, `link` and `load` take paths, bytes or cuda.core ObjectCode (pipelink/api.py) and
raise `PipelinkError` with the located diagnostics; `link` returns them in its result unless
`raise_on_error=True`. A loaded kernel's failures (a bad argument, a driver call, a debug build's stopped
wait) are `PipelinkError`s too: `PipelinkRunError` and its kinds, each with one diagnostic.
"""
__version__ = "0.1.0"


def check(inputs, **kwargs):
    """Check components, alone or as one kernel's set; see `pipelink.api.check`."""
    from .api import check as _check
    return _check(inputs, **kwargs)


def build(source, contract, output, **kwargs):
    """Compile a component against its contract; see `pipelink.api.build`."""
    from .api import build as _build
    return _build(source, contract, output, **kwargs)


def link(inputs, options=None, **kwargs):
    """Link component objects into one fused kernel; see `pipelink.api.link`."""
    from .api import link as _link
    return _link(inputs, options, **kwargs)


def load(path, device=0, **kwargs):
    """Read a kernel `LinkResult.save` wrote, loaded on `device` (None: unloaded); see `pipelink.api.load`."""
    from .api import load as _load
    return _load(path, device, **kwargs)


def __getattr__(name):
    if name in ("LinkOptions", "LinkResult"):
        from . import linker as _link_module
        return getattr(_link_module, name)
    if name == "PipelineSpec":
        from .core.pipeline import PipelineSpec
        return PipelineSpec
    if name in ("PipelinkError", "PipelinkRunError", "PipelinkWarning", "PipelinkNote"):
        from .core import diagnostics as _diagnostics
        return getattr(_diagnostics, name)
    if name in ("CheckResult", "KernelImage"):
        from . import api as _api
        return getattr(_api, name)
    raise AttributeError(name)
