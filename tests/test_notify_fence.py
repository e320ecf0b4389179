"""The fence before a task's notifications (the pipeline's `notify_fence`): `sc`, __threadfence(), by default;
`acq_rel`, a release fence, what the waiters' acquire reads pair with. The glue each writes, and the setting on a
link that notifies nothing (PL193). CPU only: the components of tests/test_in_entry_waits.py, built and linked."""
import pipelink
import test_in_entry_waits

objects = test_in_entry_waits.objects  # the fixture: piece_fill and piece_sum built


def notify_lines(glue: str) -> list[str]:
    return [line.strip() for line in glue.splitlines() if "before any count moves" in line]


def test_the_default_fence_is_sequentially_consistent(objects):
    res = pipelink.link([objects["piece_fill"], objects["piece_sum"]], pipeline={"pipeline": 1, "name": "k"})
    assert res.ok, [d.render() for d in res.diagnostics]
    (line,) = notify_lines(res.glue)
    assert "__threadfence();" in line and "fence.acq_rel" not in res.glue


def test_a_release_fence_where_the_pipeline_asks_for_one(objects):
    res = pipelink.link([objects["piece_fill"], objects["piece_sum"]],
                        pipeline={"pipeline": 1, "name": "k", "notify_fence": "acq_rel"})
    assert res.ok, [d.render() for d in res.diagnostics]
    (line,) = notify_lines(res.glue)
    assert 'asm volatile("fence.acq_rel.gpu;" ::: "memory");' in line and "__threadfence();" not in line
    assert "PL193" not in {d.code for d in res.diagnostics}


def test_a_fence_setting_where_nothing_notifies_is_warned_of(objects):
    res = pipelink.link([objects["piece_sum"]], pipeline={"pipeline": 1, "name": "k", "standalone": True,
                                                          "schedule": "persistent", "notify_fence": "acq_rel"})
    assert res.ok, [d.render() for d in res.diagnostics]
    (d,) = [d for d in res.diagnostics if d.code == "PL193"]
    assert "notify_fence" in d.message and d.location.pointer == "/notify_fence", d.render()


def test_a_fence_the_schema_does_not_know_is_refused(objects):
    res = pipelink.link([objects["piece_fill"]], pipeline={"pipeline": 1, "name": "k", "notify_fence": "seq"})
    assert not res.ok and "PL133" in {d.code for d in res.diagnostics}
