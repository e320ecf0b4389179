"""For component authors: the header generated from a contract (`header`: also the names of the symbols
the glue defines and reads) and `pipelink build` (`builder`: nvcc against the contract, the contract
embedded in the object). Imports the core, the formats and the toolchain.
"""
