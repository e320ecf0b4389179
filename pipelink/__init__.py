"""pipelink: a contract-guided linker for fused GPU kernels.

    import pipelink
    result = pipelink.link(["tile_load.o", "tile_transform.o", "block_rowsum.o"])
    kernel = result.kernel()          # needs a GPU
    kernel.launch(x, out, M=M, N=N, scale=0.5)
"""
__version__ = "0.1.0"


def link(inputs, options=None):
    """Link component objects into one fused kernel; see `pipelink.link.link`."""
    from .linker import link as _link
    return _link(inputs, options)


def __getattr__(name):
    if name in ("LinkOptions", "LinkResult"):
        from . import linker as _link_module
        return getattr(_link_module, name)
    if name == "PipelineSpec":
        from .pipeline import PipelineSpec
        return PipelineSpec
    raise AttributeError(name)
