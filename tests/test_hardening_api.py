"""The Python API refuses what the command line refuses: booleans as numbers, empty prompts."""

import pytest

from cellspec.errors import InvalidArgument
from cellspec.request import SamplingParams
from cellspec.runtime.types import Sampling


@pytest.mark.parametrize("kwargs, field", [
    (dict(temperature=True), "temperature True"),
    (dict(temperature=False), "temperature False"),
    (dict(top_p=True), "top_p True"),
    (dict(top_p=False), "top_p False"),
    (dict(temperature="0.5"), "temperature '0.5'"),
    (dict(top_p=None), "top_p None"),
])
def test_sampling_refuses_booleans_and_strings(kwargs, field):
    with pytest.raises(InvalidArgument, match=field):
        Sampling(**kwargs)
    with pytest.raises(InvalidArgument, match=field):
        SamplingParams(**kwargs)


def test_sampling_takes_ints_and_floats():
    assert Sampling(temperature=1, top_p=1).top_p == 1
    assert Sampling(temperature=0.7, top_p=0.9, top_k=5).top_k == 5
