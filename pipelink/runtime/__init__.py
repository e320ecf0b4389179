"""The runtime: a linked kernel loaded and launched through the CUDA driver.

The manifest the link writes and the launcher reads (`manifest`, `tensormap`), the driver calls
(`driver`), the launcher (`launch.Kernel`: arguments checked by `buffers`, packed with `scalars`, the
split reduction planned by `streamk`, the event workspace owned by `workspace`) and the torch operator
(`torch`). Imports the core only: a process that launches kernels needs no compiler (nvcc, NVRTC,
nvJitLink), and tests/test_layers.py keeps it so.
"""
