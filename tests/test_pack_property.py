"""The smem packing, on random items: never two live items in the same bytes, always aligned,
deterministic, and never worse than placing every item after the previous one."""
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.linker.allocate import Lifetime, SmemItem, pack

lifetimes = st.one_of(
    st.just(Lifetime(None)),
    st.builds(lambda steps, owner, phase: Lifetime(frozenset(steps), owner, phase),
              st.sets(st.integers(0, 6), min_size=1, max_size=3), st.sampled_from([None, "a", "b"]),
              st.sampled_from([None, "load", "reduce"])))
items = st.lists(st.builds(lambda i, size, align, life: SmemItem(f"buffer c.{i}", "buffer", "c", size, align, life),
                           st.integers(0, 10**6), st.integers(1, 70000), st.sampled_from([1, 8, 16, 128, 1024]),
                           lifetimes),
                 min_size=1, max_size=25, unique_by=lambda i: i.key)


@settings(max_examples=300, deadline=None)
@given(items)
def test_packing_is_sound(its):
    placed = pack(its)
    assert sorted(p.item.key for p in placed) == sorted(i.key for i in its)
    for p in placed:
        assert p.offset % p.item.align == 0
    for i, p in enumerate(placed):
        for q in placed[i + 1:]:
            if p.item.lifetime.overlaps(q.item.lifetime):
                assert p.end <= q.offset or q.end <= p.offset, (p, q)
    assert max(p.end for p in placed) <= sum(i.size + i.align for i in its)
    assert pack(list(reversed(its))) == placed  # the input order does not matter


def test_overlap_is_symmetric_and_scratch_phases_exclude():
    a = Lifetime(frozenset({1}), "c", "load")
    b = Lifetime(frozenset({1}), "c", "reduce")
    other = Lifetime(frozenset({1}), "d", "reduce")
    assert not a.overlaps(b) and not b.overlaps(a)
    assert a.overlaps(other) and other.overlaps(a)
    assert Lifetime(None).overlaps(a) and a.overlaps(Lifetime(None))
    assert not Lifetime(frozenset({1})).overlaps(Lifetime(frozenset({2})))
