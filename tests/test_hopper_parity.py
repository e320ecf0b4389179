"""Role-structured components built on CUTLASS (the Qwen3-32B MLP case study's sm90 mainloop and an
epilogue): the linked kernel against its one-unit control, byte for byte. The mainloop takes about
a minute to compile, so it is built once per session. No GPU needed."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipelink.authoring.builder import build_component, cutlass_include_dir
from pipelink.cli import main
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_file
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import REPO
from pipelink.linker.monolithic import compare_text
from pipelink.linker.passes import LinkOptions, link

STUDY = REPO / "case_studies" / "qwen3_32b_mlp"
KERNEL = "plain_64x128"
COMPONENTS = {"hopper_gemm_64x128": "hopper_gemm", "epi_store_bf16": "epi_store_bf16"}  # contract -> source


@pytest.fixture(scope="session")
def hopper_objects(tmp_path_factory):
    if cutlass_include_dir() is None:
        pytest.skip("the pinned nvidia-cutlass headers are not installed")
    d = tmp_path_factory.mktemp("hopper")

    def build(name):
        sink = DiagnosticSink()
        path = REPO / "contracts" / f"{name}.json"
        contract = load_contract_file(path, sink)
        ok = contract is not None and build_component(contract, path.read_bytes(),
                                                      REPO / "components" / COMPONENTS[name] / f"{COMPONENTS[name]}.cu",
                                                      d / f"{name}.o", sink)
        assert ok, [x.render() for x in sink.items]
        return name, d / f"{name}.o"
    with ThreadPoolExecutor(max_workers=len(COMPONENTS)) as pool:
        return dict(pool.map(build, COMPONENTS))


@pytest.fixture(scope="session")
def linked(hopper_objects):
    sink = DiagnosticSink()
    spec = load_pipeline(str(STUDY / "pipelines" / f"{KERNEL}.json"), sink)
    assert spec is not None, [x.render() for x in sink.items]
    result = link([str(hopper_objects[n]) for n in spec.components],
                  LinkOptions(pipeline=spec, monolithic=True, cache=False), extra=("control",))
    assert result.ok, [x.render() for x in result.diagnostics]
    return result


def test_one_unit_source_keeps_each_component_in_its_namespace(linked):
    src = linked.monolithic
    assert "PIPELINK_HEADER" not in src
    # the mainloop's `#define NDEBUG` still comes before the CUTLASS headers it configures
    assert src.index("#define NDEBUG") < src.index("#include <cute/tensor.hpp>")
    for name in COMPONENTS:
        unit = src.index(f"namespace pl_unit_{name} {{")
        assert src.index(f"namespace pl_component = ::pl::{name};", unit) > unit


def test_linked_kernel_is_byte_identical_to_the_one_unit_control(linked):
    """Separately compiled CUTLASS mainloop + epilogue + glue, LTO-linked, against the same code as one
    nvcc translation unit linked with the same nvJitLink options."""
    cmp = compare_text(linked.cubin, linked.context.control_cubin, KERNEL)
    assert cmp["linked_bytes"] > 10000
    assert cmp["identical"], cmp


def test_cli_emits_the_one_unit_source(hopper_objects, tmp_path, capsys):
    spec = STUDY / "pipelines" / f"{KERNEL}.json"
    code = main(["link", "--pipeline", str(spec), *(str(hopper_objects[n]) for n in COMPONENTS), "-o",
                 str(tmp_path / f"{KERNEL}.cubin"), "--emit-monolithic", str(tmp_path / "one.cu"), "--no-cache"])
    assert code == 0, capsys.readouterr().err
    assert "namespace pl_unit_hopper_gemm_64x128 {" in (tmp_path / "one.cu").read_text()
