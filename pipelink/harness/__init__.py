"""Not the library: what the demo, the benchmarks and the tests share. The shipped components built and
their pipelines (`shipped`), reference problems to run and judge a linked kernel on (`problems`),
GPU timing (`timing`) and `pipelink demo` (`demo`). The library imports nothing from here but the CLI's
`demo` command.
"""
