"""The Llama-3.2-1B decode parts (case_studies/llama32_1b_decode), on the CPU: each component's contract and
object check, each links (alone, and rmsnorm -> gemv in one persistent kernel), and the link maps say what
the contracts ask for. The GPU side is tests/test_gpu_decode_parts.py."""
import subprocess
import sys
from pathlib import Path

import pytest

from pipelink.cli import main

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    return decode_parts.build_all(tmp_path_factory.mktemp("decode"))


def test_the_contracts_check_one_by_one_and_as_the_pipeline(capsys):
    contracts = [str(p.contract) for p in decode_parts.PARTS]
    assert main(["check", *contracts]) == 0, capsys.readouterr().err
    pipelined = [str(p.contract) for p in decode_parts.PARTS if p.name in decode_parts.PIPELINED]
    assert main(["check", "--pipeline", str(decode_parts.PIPELINE), *pipelined]) == 0, capsys.readouterr().err


def test_the_objects_check(objects, capsys):
    assert main(["check", *map(str, objects.values())]) == 0, capsys.readouterr().err
    assert "4 components" in capsys.readouterr().out


@pytest.mark.parametrize("name", decode_parts.ALONE)
def test_each_component_links_alone(objects, name):
    linked = decode_parts.link_alone(objects[name])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    m = linked.manifest
    assert m.block_threads == 256 and m.resources.frame_bytes == 0 and m.resources.registers <= 128
    assert [c.name for c in m.components] == [name]
    params = [p.name for p in m.user_params]
    if name == "rmsnorm":
        assert params == ["x", "weight", "xn", "eps", "B", "H"]
        assert m.schedule == "persistent"  # its notification makes it a persistent kernel, with nobody waiting
        assert "## named barriers" in linked.link_map and "rmsnorm.reduce" in linked.link_map
    else:
        expect = ["w", "x", "y", "B", "N", "K"] if name == "gemv_bf16" else ["w", "x", "r", "y", "B", "N", "K"]
        assert params == expect
        assert m.geometry == {"GEMV_ROWS": 8, "GEMV_KCHUNK": 2048, "GEMV_BATCH": 8}
        assert m.dynamic_smem >= 8 * 2048 * 2  # x staged a K chunk of 8 batch rows at a time
        assert f"buffer {name}.xs" in linked.link_map
        assert "grid [ceil_div(N, 8)]" in linked.link_map


def test_norm_then_gemv_links_into_one_persistent_kernel(objects):
    linked = decode_parts.link_norm_gemv(objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    m = linked.manifest
    assert m.kernel == "norm_gemv" and m.schedule == "persistent" and m.dispatch == "static"
    assert list(m.tasks) == ["rmsnorm", "gemv_normed"]  # the norm's tasks first in every CTA's order
    assert [p.name for p in m.user_params] == ["x", "weight", "xn", "eps", "B", "H", "w", "y", "N", "K"]
    xn = next(p for p in m.params if p.name == "xn")
    assert xn.pointer and not xn.const  # written by rmsnorm in the launch: no read-only cache for gemv
    (event,) = m.workspace.events
    assert event.name == "normed" and event.shape == ("1",)
    assert [s.split()[0] for s in event.notified_by] == ["rmsnorm"]
    assert [s.split()[0] for s in event.waited_by] == ["gemv_normed"]
    assert "gemv_normed waits i->0 for B" in linked.link_map
    assert m.block_threads == 256 and m.resources.frame_bytes == 0 and m.resources.registers <= 128
    # both components' buffers and named barriers, none shared
    assert "buffer gemv_normed.xs" in linked.link_map and "buffer rmsnorm.partials" in linked.link_map
    assert "rmsnorm.reduce" in linked.link_map and "gemv_normed.stage" in linked.link_map


def test_the_team_build_scripts_build(tmp_path):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for script, args in (("norm/build.sh", []), ("linear/build.sh", ["gemv_bf16"])):
        proc = subprocess.run(["bash", str(CASE / script), str(tmp_path), *args], capture_output=True, text=True,
                              env=env)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.o")) == ["gemv_bf16.o", "rmsnorm.o"]
