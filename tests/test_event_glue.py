"""The strided element loops of event_glue, run on the host: every element of a task's space is
visited exactly once, by the thread the loop deals it to, whatever the block size."""
import shutil
import subprocess

import pytest

from pipelink.linker.event_glue import ElementSpace, Loop, shared_loop

CXX = shutil.which("c++") or shutil.which("g++")
pytestmark = pytest.mark.skipif(CXX is None, reason="needs a host C++ compiler")


def run_space(tmp_path, space: ElementSpace, threads: int, slot: int = 0) -> list[tuple[int, int]]:
    """(element, thread) for every body execution of `space` dealt over `threads` threads."""
    body = "std::printf(\"%lld %u\\n\", (long long)(" + space.index + "), threadIdx.x);"
    loop = "\n".join(shared_loop(space, body, threads, slot, "    "))
    src = f"""#include <algorithm>
#include <cstdio>
using std::max;
struct {{ unsigned x; }} threadIdx;
int main() {{
  const long long e0_extent_0 = 3, lo1 = 2, hi1 = 7, empty_hi = 1;
  for (threadIdx.x = 0; threadIdx.x < {threads}u; ++threadIdx.x) {{
{loop}
  }}
}}
"""
    (tmp_path / "t.cpp").write_text(src)
    subprocess.run([CXX, "-std=c++17", "-o", str(tmp_path / "t"), str(tmp_path / "t.cpp")], check=True)
    out = subprocess.run([str(tmp_path / "t")], check=True, capture_output=True, text=True).stdout
    return [tuple(int(v) for v in line.split()) for line in out.splitlines()]


@pytest.mark.parametrize("threads", [1, 4, 128])
def test_rectangular_space_with_a_guard_visits_each_element_once(tmp_path, threads):
    # a0 over ':' (0..2), a1 over range(2, 7); the guard drops odd a1 (a gathered -1)
    space = ElementSpace((Loop("a0", "0", "e0_extent_0"), Loop("a1", "lo1", "hi1")),
                         ("for (long long g_at = a1 % 2 == 0 ? a1 : -1; g_at >= 0; g_at = -1) {",),
                         "a0 * 100 + g_at")
    hits = run_space(tmp_path, space, threads)
    assert sorted(e for e, _ in hits) == sorted(a0 * 100 + a1 for a0 in range(3) for a1 in (2, 4, 6))
    # element (a0, a1) is flat index a0 * 5 + (a1 - 2): dealt to thread flat % threads
    assert all(t == (e // 100 * 5 + e % 100 - 2) % threads for e, t in hits)


def test_empty_range_visits_nothing(tmp_path):
    space = ElementSpace((Loop("a0", "lo1", "empty_hi"),), (), "a0")
    assert run_space(tmp_path, space, 8) == []


def test_single_element_goes_to_the_slot_thread(tmp_path):
    space = ElementSpace((), (), "42")
    assert run_space(tmp_path, space, 4, slot=6) == [(42, 2)]
