"""The remaining per-layer Llama-3.2-1B decode parts (case_studies/llama32_1b_decode/linear), on the CPU: the
contracts and objects of qkv_rope, gemv_swiglu, lm_head and argmax_merge check, qkv_rope, gemv_swiglu and
lm_head link alone, lm_head -> argmax_merge links into one persistent kernel, and the link maps say what
the contracts ask for. The GPU side is tests/test_gpu_decode_more.py."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelink.cli import main

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

GEMV_GEOMETRY = {"GEMV_ROWS": 8, "GEMV_KCHUNK": 2048, "GEMV_BATCH": 8}


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    return decode_parts.build_more(tmp_path_factory.mktemp("more"))


def test_the_contracts_check_one_by_one_and_as_the_pipeline(capsys):
    contracts = [str(p.contract) for p in decode_parts.MORE_PARTS]
    assert main(["check", *contracts]) == 0, capsys.readouterr().err
    pipelined = [str(p.contract) for p in decode_parts.MORE_PARTS if p.name in decode_parts.HEAD_PIPELINED]
    assert main(["check", "--pipeline", str(decode_parts.HEAD_PIPELINE), *pipelined]) == 0, capsys.readouterr().err


def test_the_objects_check(objects, capsys):
    assert main(["check", *map(str, objects.values())]) == 0, capsys.readouterr().err
    assert "4 components" in capsys.readouterr().out


def test_the_contracts_agree_with_the_test_helpers():
    swiglu = json.loads((CASE / "linear" / "gemv_swiglu.json").read_text())
    assert swiglu["geometry"]["provides"]["SWIGLU_COLS"] == decode_parts.SWIGLU_COLS
    head = json.loads((CASE / "linear" / "lm_head.json").read_text())
    assert head["geometry"]["provides"]["GEMV_ROWS"] == decode_parts.LM_ROWS
    qkv = json.loads((CASE / "linear" / "qkv_rope.json").read_text())
    (w,) = [p for p in qkv["entry"]["params"] if p["name"] == "w"]
    assert w["shape"][0] == decode_parts.QKV
    # one task per 4 rotary pairs of each of the 48 heads: 8 tasks of 8 rows cover a head's 64 rows
    assert qkv["geometry"]["tile_sequence"]["grid"] == [decode_parts.QKV // decode_parts.HEAD_DIM, 8]


def _no_spills(m):
    assert m.block_threads == 256 and m.resources.frame_bytes == 0 and m.resources.registers <= 128


@pytest.mark.parametrize("name", decode_parts.MORE_ALONE)
def test_each_component_links_alone(objects, name):
    linked = decode_parts.link_alone(objects[name])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert not [d for d in linked.diagnostics if d.severity == "warning"], [d.render() for d in linked.diagnostics]
    m = linked.manifest
    _no_spills(m)
    assert "subroutines none" in linked.link_map or name == "gemv_swiglu"  # gemv_swiglu: the IEEE division's slow path
    assert [c.name for c in m.components] == [name]
    params = [p.name for p in m.user_params]
    if name == "qkv_rope":
        assert params == ["w", "x", "pos", "inv_freq", "q", "k_cache", "v_cache", "B", "K", "Lmax"]
        assert m.geometry == GEMV_GEOMETRY
        assert "grid [48, 8]" in linked.link_map
        assert "buffer qkv_rope.xs" in linked.link_map and "buffer qkv_rope.res" in linked.link_map
    elif name == "gemv_swiglu":
        assert params == ["w", "x", "h", "B", "I", "K"]
        assert m.geometry == {**GEMV_GEOMETRY, "SWIGLU_COLS": 4}
        assert "grid [ceil_div(I, 4)]" in linked.link_map
        assert "buffer gemv_swiglu.res" in linked.link_map
    else:
        assert params == ["w", "x", "logits", "part", "B", "V", "K"]
        assert m.schedule == "persistent"  # its notification makes it a persistent kernel, with nobody waiting
        assert "grid [ceil_div(V, 8)]" in linked.link_map
        assert "buffer lm_head.keys" in linked.link_map
    assert m.dynamic_smem >= 8 * 2048 * 2  # x staged a K chunk of 8 batch rows at a time
    assert f"{name}.stage" in linked.link_map


def test_lm_head_then_argmax_links_into_one_persistent_kernel(objects):
    linked = decode_parts.link_lm_head_argmax(objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert not [d for d in linked.diagnostics if d.code == "PL141"]
    m = linked.manifest
    assert m.kernel == "lm_head_argmax" and m.schedule == "persistent" and m.dispatch == "static"
    assert list(m.tasks) == ["lm_head", "argmax_merge"]  # the GEMV tasks first in every CTA's order
    assert [p.name for p in m.user_params] == ["w", "x", "logits", "part", "B", "V", "K", "token"]
    part = next(p for p in m.params if p.name == "part")
    assert part.pointer and not part.const  # written by lm_head in the launch: no read-only cache for the merge
    assert m.geometry == GEMV_GEOMETRY
    (event,) = m.workspace.events
    assert event.name == "partials" and event.shape == ("1",)
    assert [s.split()[0] for s in event.notified_by] == ["lm_head"]
    assert [s.split()[0] for s in event.waited_by] == ["argmax_merge"]
    assert "lm_head notifies n->:; argmax_merge waits b->0 for ((V + 8 - 1) / 8)" in linked.link_map
    assert "lm_head: grid [ceil_div(V, 8)]" in linked.link_map and "argmax_merge: grid [B]" in linked.link_map
    _no_spills(m)
    assert "buffer lm_head.xs" in linked.link_map and "buffer argmax_merge.best" in linked.link_map
    assert "lm_head.stage" in linked.link_map and "argmax_merge.reduce" in linked.link_map


def test_the_gemvs_still_link_on_the_shared_body(tmp_path):
    # gemv.cuh's plain form now runs through rows_with: the existing GEMVs build and link as before
    objects = decode_parts.build_all(tmp_path, [p for p in decode_parts.PARTS if p.folder == "linear"])
    for name in ("gemv_bf16", "gemv_residual"):
        linked = decode_parts.link_alone(objects[name])
        assert linked.ok, [d.render() for d in linked.diagnostics]
        _no_spills(linked.manifest)


def test_the_workspace_shape_helper():
    assert decode_parts.argmax_workspace_shape(1, decode_parts.VOCAB) == (1, 16032)
    assert decode_parts.argmax_workspace_shape(3, 1001) == (3, 126)
    assert decode_parts.argmax_workspace_shape(8, 8) == (8, 1)


def test_the_team_build_script_builds(tmp_path):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run(["bash", str(CASE / "linear" / "build.sh"), str(tmp_path), "qkv_rope", "argmax_merge"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.o")) == ["argmax_merge.o", "qkv_rope.o"]
