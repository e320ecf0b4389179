"""The fused-norm GEMVs (case_studies/llama32_1b_decode/linear: qkv_rope_normed, gemv_swiglu_normed), on the
CPU: the contracts and objects check, each links alone without spills, and the link maps say what the
contracts ask for. The GPU side (float64 references, bit-identity with rmsnorm -> qkv_rope / gemv_swiglu) is
tests/test_gpu_decode_normed.py."""
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
QKV_GEOMETRY = {"QKV_ROWS": 16, "GEMV_KCHUNK": 2048, "GEMV_BATCH": 8}  # q/k/v rows a task: a name of its own


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    return decode_parts.build_normed(tmp_path_factory.mktemp("normed"))


def test_the_contracts_check(capsys):
    assert main(["check", *[str(p.contract) for p in decode_parts.NORMED_PARTS]]) == 0, capsys.readouterr().err


def test_the_objects_check(objects, capsys):
    assert main(["check", *map(str, objects.values())]) == 0, capsys.readouterr().err
    assert "2 components" in capsys.readouterr().out


def test_the_contracts_differ_from_the_plain_ones_only_by_the_norm():
    for name in decode_parts.NORMED_ALONE:
        plain = json.loads((CASE / "linear" / f"{name.removesuffix('_normed')}.json").read_text())
        normed = json.loads((CASE / "linear" / f"{name}.json").read_text())
        assert normed["geometry"] == plain["geometry"] and normed["ports"] == plain["ports"]
        assert "events" not in normed and "events" not in plain
        names = [p["name"] for p in normed["entry"]["params"]]
        plain_names = [p["name"] for p in plain["entry"]["params"]]
        assert [n for n in names if n not in ("norm_w", "eps")] == plain_names
        assert names[names.index("x") + 1:names.index("x") + 3] == ["norm_w", "eps"]
        (norm_w,) = [p for p in normed["entry"]["params"] if p["name"] == "norm_w"]
        assert norm_w["shape"] == ["K"] and norm_w["const"] and norm_w["dtype"] == "bf16"
        buffers = {b["name"] for b in normed["smem"]["buffers"]}
        assert buffers == {b["name"] for b in plain["smem"]["buffers"]} | {"norm"}
        # the norm's arithmetic must match rmsnorm's: the same compile flags and 8 warps
        rms = json.loads((CASE / "norm" / "rmsnorm.json").read_text())
        assert normed["targets"] == rms["targets"] and normed["threads"] == rms["threads"]


def _no_spills(m):
    assert m.block_threads == 256 and m.resources.frame_bytes == 0 and m.resources.registers <= 128


@pytest.mark.parametrize("name", decode_parts.NORMED_ALONE)
def test_each_links_alone(objects, name):
    linked = decode_parts.link_alone(objects[name])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert not [d for d in linked.diagnostics if d.severity == "warning"], [d.render() for d in linked.diagnostics]
    m = linked.manifest
    _no_spills(m)
    assert [c.name for c in m.components] == [name]
    params = [p.name for p in m.user_params]
    if name == "qkv_rope_normed":
        assert params == ["w", "x", "norm_w", "eps", "pos", "inv_freq", "q", "k_cache", "v_cache", "B", "K", "Lmax"]
        assert m.geometry == QKV_GEOMETRY
        assert "grid [48, 64 // 16]" in linked.link_map
    else:
        assert params == ["w", "x", "norm_w", "eps", "h", "B", "I", "K"]
        assert m.geometry == {"GEMV_KCHUNK": 2048, "GEMV_BATCH": 8, "SWIGLU_COLS": 8}
        assert "grid [ceil_div(I, 8)]" in linked.link_map
    assert m.schedule != "persistent"  # no events: a plain kernel
    for buffer in ("xs", "res", "norm"):
        assert f"buffer {name}.{buffer}" in linked.link_map
    assert m.dynamic_smem >= 8 * 2048 * 2 + 8 * 8 * 4 + 9 * 8 * 4
    assert f"{name}.stage" in linked.link_map


def test_the_plain_ones_still_link_on_the_shared_bodies(tmp_path):
    objects = decode_parts.build_all(tmp_path, [p for p in decode_parts.MORE_PARTS
                                                if p.name in ("qkv_rope", "gemv_swiglu")])
    for name in ("qkv_rope", "gemv_swiglu"):
        linked = decode_parts.link_alone(objects[name])
        assert linked.ok, [d.render() for d in linked.diagnostics]
        _no_spills(linked.manifest)


def test_the_team_build_script_builds_them(tmp_path):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run(["bash", str(CASE / "linear" / "build.sh"), str(tmp_path), *decode_parts.NORMED_ALONE],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.o")) == ["gemv_swiglu_normed.o", "qkv_rope_normed.o"]
