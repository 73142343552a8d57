import pytest

from cellspec.runtime.planner import plan_slices

WIDTHS = (1, 2, 4, 8, 16, 32)


@pytest.mark.parametrize("dynamic", [0, 64])
def test_slices_cover_every_token_once(dynamic):
    for total in range(1, 3 * WIDTHS[-1] + 1):
        slices = plan_slices(total, WIDTHS, dynamic)
        covered = [t for s in slices for t in range(s.offset, s.offset + s.length)]
        assert covered == list(range(total)), total
        for s in slices:
            assert s.length <= s.width
            if s.is_static:
                assert s.width in WIDTHS
                # the narrowest static width that holds the slice, never split where one fits
                assert s.width == min(w for w in WIDTHS if w >= s.length)
            else:
                assert s.width == s.length and WIDTHS[-1] < s.length <= dynamic
        if total <= WIDTHS[-1]:
            assert len(slices) == 1 and slices[0].is_static
        elif dynamic:
            assert all(not s.is_static and s.length == dynamic for s in slices[:-1])
            assert slices[-1].is_static == (slices[-1].length <= WIDTHS[-1])
        else:
            assert all(s.width == WIDTHS[-1] for s in slices[:-1])


def test_exact_plans():
    def shape(total, dynamic=0):
        return [(s.length, s.width, s.is_static) for s in plan_slices(total, WIDTHS, dynamic)]

    assert shape(5) == [(5, 8, True)]
    assert shape(32) == [(32, 32, True)]
    assert shape(40) == [(32, 32, True), (8, 8, True)]
    assert shape(40, 64) == [(40, 40, False)]
    assert shape(70, 64) == [(64, 64, False), (6, 8, True)]
    assert shape(100, 64) == [(64, 64, False), (36, 36, False)]
