"""The Llama-3.2-1B decode attention (case_studies/llama32_1b_decode/attention), on the CPU: the contracts and
objects check, attn_head links alone, attn_split -> attn_merge (flash-decoding) links into one persistent
kernel, and the link maps say what the contracts ask for. The GPU side is tests/test_gpu_decode_attention.py."""
import json
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
    return decode_parts.build_attention(tmp_path_factory.mktemp("attention"))


def test_the_contracts_check_one_by_one_and_as_the_pipeline(capsys):
    contracts = [str(p.contract) for p in decode_parts.ATTENTION_PARTS]
    assert main(["check", *contracts]) == 0, capsys.readouterr().err
    pipelined = [str(p.contract) for p in decode_parts.ATTENTION_PARTS if p.name in decode_parts.ATTN_PIPELINED]
    assert main(["check", "--pipeline", str(decode_parts.ATTN_PIPELINE), *pipelined]) == 0, capsys.readouterr().err


def test_the_objects_check(objects, capsys):
    assert main(["check", *map(str, objects.values())]) == 0, capsys.readouterr().err
    assert "4 components" in capsys.readouterr().out


def test_the_contracts_agree_with_the_test_helpers():
    # the helpers read attn_split's constants from its contract; the record is what attn_merge reads
    assert decode_parts.PART_RECORD == 4 * decode_parts.HEAD_DIM + 4 + 4  # acc [4][64], m [4], l [4]
    merge = json.loads((CASE / "attention" / "attn_merge.json").read_text())
    (part,) = [p for p in merge["entry"]["params"] if p["name"] == "part"]
    assert part["shape"][-1] == decode_parts.PART_RECORD


def _no_spills(m):
    assert m.block_threads == 256 and m.resources.frame_bytes == 0 and m.resources.registers <= 128


def test_attn_head_links_alone(objects):
    linked = decode_parts.link_alone(objects["attn_head"])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert not [d for d in linked.diagnostics if d.code == "PL141"]  # no register cap below what the code needs
    m = linked.manifest
    _no_spills(m)
    assert [c.name for c in m.components] == ["attn_head"]
    assert [p.name for p in m.user_params] == ["q", "k", "v", "pos", "o", "B", "L", "Lmax"]
    assert m.geometry == {"ATTN_UNROLL": 2, "ATTN_STAGES": 2, "ATTN_RING_ROUNDS": 8, "ATTN_WALK": 2}
    assert m.dynamic_smem >= 32 * 264 * 4  # the 32 position groups' softmax states
    assert "buffer attn_head.red" in linked.link_map and "attn_head.merge" in linked.link_map
    assert "grid [B, 8]" in linked.link_map


def test_attn_last_links_alone_and_merges_without_an_event(objects):
    # flash-decoding in one component: the last split of (b, h) merges, so there is no event to wait on
    linked = decode_parts.link_alone(objects["attn_last"])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    m = linked.manifest
    _no_spills(m)
    assert [p.name for p in m.user_params] == ["q", "k", "v", "pos", "part", "arrived", "o", "B", "L", "Lmax"]
    assert m.geometry == {"SPLIT_TASKS": 256, "SPLIT_MIN_L": 128, "ATTN_UNROLL": 2, "ATTN_STAGES": 2, "ATTN_RING_ROUNDS": 8, "ATTN_WALK": 2, "PART_RECORD": 264}
    assert "buffer attn_last.last" in linked.link_map
    # the same cut of the context as attn_split's (its grid and workspace), its own count per (b, h)
    split = json.loads((CASE / "attention" / "attn_split.json").read_text())
    last = json.loads((CASE / "attention" / "attn_last.json").read_text())
    assert last["geometry"] == split["geometry"]
    shapes = {p["name"]: p.get("shape") for p in last["entry"]["params"]}
    assert shapes["part"] == next(p["shape"] for p in split["entry"]["params"] if p["name"] == "part")
    assert shapes["arrived"] == ["B * 8"] and "events" not in last


def test_split_then_merge_links_into_one_persistent_kernel(objects):
    linked = decode_parts.link_attn_split(objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert not [d for d in linked.diagnostics if d.code == "PL141"]
    m = linked.manifest
    assert m.kernel == "attn_split_merge" and m.schedule == "persistent" and m.dispatch == "static"
    assert list(m.tasks) == ["attn_split", "attn_merge"]  # the splits first in every CTA's order
    assert [p.name for p in m.user_params] == ["q", "k", "v", "pos", "part", "B", "L", "Lmax", "o"]
    part = next(p for p in m.params if p.name == "part")
    assert part.pointer and not part.const  # written by attn_split in the launch
    assert m.geometry == {"SPLIT_TASKS": 256, "SPLIT_MIN_L": 128, "ATTN_UNROLL": 2, "ATTN_STAGES": 2, "ATTN_RING_ROUNDS": 8, "ATTN_WALK": 2, "PART_RECORD": 264}
    (event,) = m.workspace.events
    assert event.name == "splits" and event.shape == ("B", "8")
    assert [s.split()[0] for s in event.notified_by] == ["attn_split"]
    assert [s.split()[0] for s in event.waited_by] == ["attn_merge"]
    # the merge waits for every split: the count is the split grid's extent, min(by length, by tasks)
    assert ("attn_split notifies bhs->bh; attn_merge waits bh->bh for ((((L + 128 - 1) / 128)) < "
            "(((256 + (B * 8) - 1) / (B * 8))) ? (((L + 128 - 1) / 128)) : (((256 + (B * 8) - 1) / (B * 8))))") in linked.link_map
    assert "attn_split: grid [B, 8, min(ceil_div(L, 128), ceil_div(256, B * 8))]" in linked.link_map
    assert "attn_merge: grid [B, 8]" in linked.link_map
    _no_spills(m)
    assert "buffer attn_split.red" in linked.link_map and "attn_split.merge" in linked.link_map


def test_attn_split_alone_links_with_nobody_waiting(objects):
    # attn_split alone still links: a persistent kernel whose event nobody waits for
    linked = decode_parts.link_alone(objects["attn_split"])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert linked.manifest.schedule == "persistent"


def test_the_workspace_shape_helper():
    # S = min(ceil_div(L, 128), ceil_div(256, 8 B)) splits: by length at short contexts, by tasks at long ones
    assert decode_parts.attn_workspace_shape(1, 1) == (8, 1, 264)
    assert decode_parts.attn_workspace_shape(1, 128) == (8, 1, 264)
    assert decode_parts.attn_workspace_shape(1, 129) == (8, 2, 264)
    assert decode_parts.attn_workspace_shape(1, 1024) == (8, 8, 264)
    assert decode_parts.attn_workspace_shape(1, 2048) == (8, 16, 264)
    assert decode_parts.attn_workspace_shape(1, 4096) == (8, 32, 264)
    assert decode_parts.attn_workspace_shape(1, 16384) == (8, 32, 264)
    assert decode_parts.attn_workspace_shape(3, 256) == (24, 2, 264)
    assert decode_parts.attn_workspace_shape(3, 4097) == (24, 11, 264)
    assert decode_parts.attn_workspace_shape(8, 4097) == (64, 4, 264)


def test_the_team_build_script_builds(tmp_path):
    env = {"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run(["bash", str(CASE / "attention" / "build.sh"), str(tmp_path), "attn_head", "attn_merge"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.o")) == ["attn_head.o", "attn_merge.o"]


@pytest.mark.parametrize("stages", [2, 4])
def test_the_tensor_core_walk_links_without_spills(objects, tmp_path, stages):
    # ATTN_WALK 2: the three components on mma.sync (4 m16n8k16 for q K^T, 8 m16n8k8 for P V a tile) with K and
    # V read from the ring by ldmatrix, within 128 registers and no frame, at 2 and 4 stages
    from pipelink import toolchain
    values = tuple((c, key, value) for c in ("attn_head", "attn_split", "attn_last")
                   for key, value in (("ATTN_WALK", 2), ("ATTN_STAGES", stages)))
    built = decode_parts.build_value_set(tmp_path, decode_parts.ValueSet("mma", values), objects)
    for linked in (decode_parts.link_alone(built["attn_head"]), decode_parts.link_attn_split(built),
                   decode_parts.link_alone(built["attn_last"])):
        assert linked.ok, [d.render() for d in linked.diagnostics]
        _no_spills(linked.manifest)
        assert linked.manifest.geometry["ATTN_WALK"] == 2
        sass = toolchain.disassemble(linked.cubin)
        assert sass.count("HMMA.16816.F32.BF16") == 4 and sass.count("HMMA.1688.F32.BF16") == 8, linked.manifest.kernel
        assert "LDSM.16.M88.4" in sass and "LDSM.16.MT88.4" in sass
