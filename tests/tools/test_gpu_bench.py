"""tools/gpu_bench.py's host-side helpers (the GPU runs themselves are measured, not tested)."""

import pytest

from tools.gpu_bench import agreement


def test_agreement_counts_equal_answers_and_each_first_difference():
    ours = [[5, 6, 7, 2], [5, 6], [5, 6, 7], [9], [1, 2, 3]]
    theirs = [[5, 6, 7, 2], [5, 8], [5, 6], [9], [4, 2, 3]]
    assert agreement(ours, theirs) == {"equal": 2, "of": 5,
                                       "first_difference": [None, 1, 2, None, 0]}


def test_agreement_refuses_answers_to_other_prompts():
    with pytest.raises(ValueError, match="2 answers against the peer's 1"):
        agreement([[1], [2]], [[1]])
