import pytest

from pipelink.core.indexmap import MapError, parse_map


@pytest.mark.parametrize("text,kind,rank,tensors", [
    ("ij->ij", "one_to_one", 2, ()),
    ("ij->ji", "one_to_one", 2, ()),
    ("ij->i", "reduction", 1, ()),
    ("i->i,:", "broadcast", 2, ()),
    ("i->topk[i,:]", "data_dependent", 1, ("topk",)),
    ("i->range(indptr[i], indptr[i+1])", "data_dependent", 1, ("indptr",)),
    ("i->range(i - 1, i + 2)", "window", 1, ()),   # affine bounds: no device data
    ("i->range(i, indptr[i])", "data_dependent", 1, ("indptr",)),
    ("ij->i//2, j", "one_to_one", 2, ()),
    ("ijk->k", "reduction", 1, ()),
])
def test_kinds(text, kind, rank, tensors):
    m = parse_map(text)
    assert m.kind == kind
    assert m.rank == rank
    assert m.tensors == tensors


@pytest.mark.parametrize("bad", ["ij", "ii->i", "ij->k", "IJ->ij", "abcd->a", "i->", "i->x[j]", "i->range(1)",
                                 "i->i**2", "i->1:2", "i->f(i)", "->i", "i->topk[i,", "i->topk[i, 1:3]",
                                 "i->i,", "ij->i, j,"])
def test_rejects(bad):
    with pytest.raises(MapError):
        parse_map(bad)


@pytest.mark.parametrize("bad, says", [
    ("i->i // 0", "divides by zero"), ("i->range(max(i - 1, 0), i % 0)", "divides by zero"),
    ("i->" + "+".join(["i"] * 3000), "nests too deeply"), ("i->99999999999999999999999999", "64 bits"),
    ("i->\uff49", "not ASCII")])
def test_a_map_dividing_by_zero_too_long_or_with_look_alike_letters_is_a_map_error(bad, says):
    """They had crashed the checker (ZeroDivisionError, RecursionError) or been read as another map."""
    with pytest.raises(MapError, match=says):
        parse_map(bad)
