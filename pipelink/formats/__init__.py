"""The files pipelink reads and writes: fatbins, LTO-IR and archives (`fatbin`, `inputs`: an input's
objects and its contract, embedded or beside it), cubins and their ELF (`cubin`), and every output path
checked and written atomically (`outputs`). Imports the core and the toolchain.
"""
