"""The `loops` pass (linker/loops.py): a component's streaming loops linked alone against the same loops in
the fused kernel, whose one register allocation all components share."""
from pipelink.cli import main
from pipelink.harness.shipped import REPO
from pipelink.authoring.conformance import StreamingLoop, loop_growth, spills_in_streaming_loops, streaming_loops
from pipelink.linker.loops import GROWTH_WARN, MIN_EXTRA, render

SASS = """\
.L_x_1:
        /*0010*/                   LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;
        /*0020*/               @P0 IMAD R3, R3, 0x2, RZ ;
.L_x_2:
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0040*/              @!PT LDS RZ, [RZ] ;
        /*0050*/                   HGMMA.64x64x16.F32.BF16 R56, gdesc[UR8], R56, gsb0 ;
        /*0060*/                   LDL R5, [R1+0x4] ;
        /*0070*/              @!P1 BRA `(.L_x_2) ;
        /*0080*/                   BRA `(.L_x_1) ;
.L_x_3:
        /*0090*/                   LDG.E.64 R4, desc[UR4][R6.64] ;
        /*00a0*/                   NANOSLEEP 0x20 ;
        /*00b0*/                   BRA `(.L_x_3) ;
.L_x_4:
        /*00c0*/                   LDG.E.128 R8, desc[UR4][R6.64] ;
        /*00d0*/                   IADD3 R6, P0, R6, 0x10, RZ ;
        /*00e0*/               @P0 BRA `(.L_x_4) ;
"""


def test_streaming_loops_are_the_innermost_loops_that_stream():
    loops = streaming_loops(SASS)
    # .L_x_1 holds .L_x_2 (not innermost); .L_x_3 polls an event (it sleeps)
    assert [(lp.first, lp.instructions, lp.ops, lp.local_loads) for lp in loops] == [
        (3, 5, (("HGMMA", 2),), 1), (14, 3, (("LDG.E.128", 1),), 0)]
    assert loops[0].describe() == "2 HGMMA"
    assert spills_in_streaming_loops(SASS) == [(3, 8, 1)]


def _loop(ops, n, first=0):
    return StreamingLoop(first, first + n, n, ops, 0)


A, X, Y = (("LDGSTS", 12), ("HGMMA", 8)), (("LDG.E.128", 8),), (("HMMA", 32),)


def test_loops_match_by_their_streaming_instructions_or_not_at_all():
    alone = {"expert": [_loop(A, 100)], "merge": [_loop(X, 50), _loop(Y, 40, 60)], "router": [_loop(Y, 30)]}
    kernel = [_loop(A, 120), _loop(A, 130), _loop(X, 49), _loop((("HMMA", 16),), 90)]
    got = loop_growth(alone, kernel)
    # the expert's loop: the longest kernel loop with its instructions; Y is both merge's and router's: no claim
    assert [(g.component, g.loop.instructions, g.linked) for g in got] == [("expert", 100, 130), ("merge", 50, 49)]
    assert round(got[0].growth, 2) == 0.30 and got[0].growth > GROWTH_WARN
    assert loop_growth(alone, []) == [] and loop_growth({}, kernel) == []


def test_one_components_loops_of_the_same_instructions_compare_longest_with_longest():
    """A template instantiated twice (two ring depths) has two loops of the same streaming instructions."""
    got = loop_growth({"expert": [_loop(A, 100), _loop(A, 110, 200)]}, [_loop(A, 105), _loop(A, 140)])
    assert [(g.component, g.loop.instructions, g.linked) for g in got] == [("expert", 110, 140)]


def test_the_map_section_says_what_matched():
    growths = loop_growth({"expert": [_loop(A, 100)]}, [_loop(A, 100 + MIN_EXTRA)])
    text = render(growths, ["dispatch"], ["stale"])
    assert "## streaming loops (each component linked as a kernel of its own, and in this kernel)" in text
    assert "expert: 12 LDGSTS, 8 HGMMA: 100 instructions alone, 116 in this kernel (+16%)" in text
    assert "no loop matched for: dispatch" in text and "could not be linked alone: stale" in text
    assert "none matched" in render([], [], [])
    sized = render(growths, [], [], {"router": 20480, "expert": 40960}, 163840)
    assert "machine code, KB: this kernel 160.0; each component in a kernel of its own: expert 40.0, router 20.0" in sized


def test_link_loops_adds_the_section_to_the_map(capsys, shipped_objects, tmp_path):
    objects = [shipped_objects[n] for n in ("tile_load", "tile_transform", "block_rowsum")]
    code = main(["link", "--pipeline", str(REPO / "pipelines" / "rowsum.json"), *map(str, objects),
                 "-o", str(tmp_path / "k.cubin"), "--loops", "--map", str(tmp_path / "k.map")])
    assert code == 0, capsys.readouterr().err
    text = (tmp_path / "k.map").read_text()
    assert "## streaming loops (each component linked as a kernel of its own, and in this kernel)" in text
    # the loader links as a kernel of its own; the consumers of its tile, their input unwired, only into the probe
    assert "tile_load: 4 LDG.E.128" in text and "machine code, KB: this kernel" in text
    probed = next(ln for ln in text.splitlines() if ln.startswith("  alone means the bare probe kernel"))
    assert "block_rowsum" in probed and "tile_load" not in probed
    code = main(["link", "--pipeline", str(REPO / "pipelines" / "rowsum.json"), *map(str, objects),
                 "-o", str(tmp_path / "k2.cubin"), "--map", str(tmp_path / "k2.map")])
    assert code == 0 and "## streaming loops" not in (tmp_path / "k2.map").read_text()
