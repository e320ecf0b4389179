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
QKV_GEOMETRY = {"QKV_ROWS": 16, "GEMV_KCHUNK": 2048, "GEMV_BATCH": 8}  # q/k/v rows a task: a name of its own


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
    assert head["geometry"]["provides"]["LM_ROWS"] == decode_parts.LM_ROWS
    qkv = json.loads((CASE / "linear" / "qkv_rope.json").read_text())
    (w,) = [p for p in qkv["entry"]["params"] if p["name"] == "w"]
    assert w["shape"][0] == decode_parts.QKV
    # one task per QKV_ROWS / 2 rotary pairs of each of the 48 heads: 64 // QKV_ROWS tasks cover a head's 64 rows
    assert qkv["geometry"]["tile_sequence"]["grid"] == [decode_parts.QKV // decode_parts.HEAD_DIM, "64 // QKV_ROWS"]


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
        assert m.geometry == QKV_GEOMETRY
        assert "grid [48, 64 // 16]" in linked.link_map
        assert "buffer qkv_rope.xs" in linked.link_map and "buffer qkv_rope.res" in linked.link_map
    elif name == "gemv_swiglu":
        assert params == ["w", "x", "h", "B", "I", "K"]
        assert m.geometry == {"GEMV_KCHUNK": 2048, "GEMV_BATCH": 8, "SWIGLU_COLS": 8}  # its rows: 2 * SWIGLU_COLS
        assert "grid [ceil_div(I, 8)]" in linked.link_map
        assert "buffer gemv_swiglu.res" in linked.link_map
    else:
        assert params == ["w", "x", "logits", "part", "B", "V", "K"]
        assert m.geometry == {"LM_ROWS": 16, "GEMV_KCHUNK": 2048, "GEMV_BATCH": 8}  # its rows: a name of its own
        assert m.schedule == "persistent"  # its notification makes it a persistent kernel, with nobody waiting
        assert "grid [ceil_div(V, 16)]" in linked.link_map
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
    assert m.geometry == {"LM_ROWS": 16, "GEMV_KCHUNK": 2048, "GEMV_BATCH": 8}
    (event,) = m.workspace.events
    assert event.name == "partials" and event.shape == ("1",)
    assert [s.split()[0] for s in event.notified_by] == ["lm_head"]
    assert [s.split()[0] for s in event.waited_by] == ["argmax_merge"]
    assert "lm_head notifies n->:; argmax_merge waits b->0 for ((V + 16 - 1) / 16)" in linked.link_map
    assert "lm_head: grid [ceil_div(V, 16)]" in linked.link_map and "argmax_merge: grid [B]" in linked.link_map
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
    assert decode_parts.argmax_workspace_shape(1, decode_parts.VOCAB) == (1, 8016)
    assert decode_parts.argmax_workspace_shape(3, 1001) == (3, 63)
    assert decode_parts.argmax_workspace_shape(8, 8) == (8, 1)


def test_the_team_build_script_builds(tmp_path):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run(["bash", str(CASE / "linear" / "build.sh"), str(tmp_path), "qkv_rope", "argmax_merge"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.o")) == ["argmax_merge.o", "qkv_rope.o"]


# --- the rotary frequencies -----------------------------------------------------------------------------

def _f32(v):
    import struct
    return struct.unpack("<f", struct.pack("<f", v))[0]


def test_llama3_inv_freq_by_hand():
    """Against the formula in float64 (Llama-3's scaling: wavelengths below 8192 / 4 kept, above 8192 divided by
    32, in between interpolated), to float32 precision, and the bands where the Llama-3.2 frequencies fall."""
    import math
    got = decode_parts.llama3_inv_freq()
    assert len(got) == 32 and all(_f32(v) == v for v in got)  # float32 values
    for d in range(32):
        base = 500000.0 ** (-d / 32)
        wavelen = 2 * math.pi / base
        if wavelen < 2048:
            want = base
        elif wavelen > 8192:
            want = base / 32
        else:
            smooth = (8192 / wavelen - 1) / 3
            want = (1 - smooth) * base / 32 + smooth * base
        assert math.isclose(got[d], want, rel_tol=1e-6), (d, got[d], want)
    # pairs 0..14 are kept, 15..17 interpolated, 18..31 divided by 32
    assert got[0] == 1.0 and got[14] == _f32(1 / _f32(500000.0 ** (14 / 32)))
    assert math.isclose(got[15], 0.0012905480, rel_tol=1e-7) and math.isclose(got[17], 9.708286e-05, rel_tol=1e-6)
    assert math.isclose(got[18], 500000.0 ** (-18 / 32) / 32, rel_tol=1e-6)
    assert math.isclose(got[31], 500000.0 ** (-31 / 32) / 32, rel_tol=1e-6)
    # no scaling (factor 1): the plain frequencies theta^(-2d/64)
    plain = decode_parts.llama3_inv_freq(factor=1.0)
    assert all(math.isclose(plain[d], 500000.0 ** (-d / 32), rel_tol=1e-6) for d in range(32))


def test_llama3_inv_freq_matches_a_float32_emulation():
    """The same steps in numpy float32 (each operation rounded to float32, `scalar / tensor` as reciprocal then
    product, as torch does): bit for bit. The power is taken in float64 and rounded (numpy's float32 power
    differs by an ulp or two between builds)."""
    np = pytest.importorskip("numpy")
    f = np.float32
    i = np.arange(0, 64, 2).astype(np.float32) / f(64)
    inv = np.reciprocal(np.power(np.float64(500000.0), i.astype(np.float64)).astype(np.float32)) * f(1.0)
    wavelen = np.reciprocal(inv) * f(2 * np.pi)
    scaled = np.where(wavelen > f(8192), inv / f(32), inv)
    smooth = (np.reciprocal(wavelen) * f(8192) - f(1)) / f(3)
    smoothed = (f(1) - smooth) * scaled / f(32) + smooth * scaled
    medium = ~(wavelen < f(2048)) & ~(wavelen > f(8192))
    want = np.where(medium, smoothed, scaled).astype(np.float32)
    got = np.array(decode_parts.llama3_inv_freq(), dtype=np.float32)
    assert (got.view(np.int32) == want.view(np.int32)).all(), (got, want)


def test_llama3_inv_freq_matches_transformers():
    """Against transformers' own ROPE_INIT_FUNCTIONS["llama3"] where transformers is installed."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    rope = {"rope_type": "llama3", **decode_parts.ROPE_SCALING}
    kwargs = dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                  max_position_embeddings=131072)
    try:  # transformers 5: rope_parameters carries rope_theta
        config = LlamaConfig(**kwargs, rope_parameters={**rope, "rope_theta": decode_parts.ROPE_THETA})
    except TypeError:
        config = LlamaConfig(**kwargs, rope_theta=decode_parts.ROPE_THETA, rope_scaling=rope)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (32,)
    got = torch.tensor(decode_parts.llama3_inv_freq(), dtype=torch.float32)
    ulps = (got.view(torch.int32) - inv_freq.view(torch.int32)).abs()
    assert int(ulps.max()) <= 1, (got, inv_freq)
