"""The core: what a contract and a pipeline are and mean, with no binary format, toolchain or GPU.

The data model (`model`), the contract and pipeline readers (`loader`, `pipeline`, through `jsonread` and
the schemas in `validate`), the checks of a set of contracts (`checks`), expressions and index maps
(`expr`, `indexmap`), the targets (`targets`) and the diagnostics every layer reports with.
Imports nothing else of pipelink.
"""
