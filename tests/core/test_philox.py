"""The array Philox (core.numerics.philox) equals numpy's per-chain Philox streams bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kameleon.core.numerics.philox import raw, uniforms
from kameleon.core.numerics.rng import MAX_SEED, Stream, fresh_generator

seeds = st.integers(0, MAX_SEED)
chains = st.integers(0, 2**32)
iterations = st.integers(0, 2**62)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(seeds, chains, iterations), min_size=1, max_size=9),
    st.sampled_from(list(Stream)),
    st.integers(1, 13),
)
def test_raw_words_equal_numpys_philox(
    keys: list[tuple[int, int, int]], stream: Stream, count: int
) -> None:
    seed, chain, iteration = (
        np.array(column, dtype=np.uint64) for column in zip(*keys, strict=True)
    )
    words = raw(seed, chain, iteration, stream, count)
    assert words.shape == (len(keys), count)
    for row, (s, c, t) in zip(words, keys, strict=True):
        expected = fresh_generator(s, c, t, stream).bit_generator.random_raw(count)
        np.testing.assert_array_equal(row, expected)


def test_uniforms_equal_generator_random_for_many_chains() -> None:
    chain = np.arange(256)
    iteration = np.arange(1000, 1256)
    got = uniforms(2**63 - 1, chain, iteration, Stream.ACCEPT, 2)
    for c in range(256):
        expected = fresh_generator(2**63 - 1, c, 1000 + c, Stream.ACCEPT).random(2)
        assert got[c].tolist() == expected.tolist()  # exactly, not approximately


@pytest.mark.parametrize("count", [1, 4, 5, 8])
def test_uniforms_lie_in_the_unit_interval_and_scalars_broadcast(count: int) -> None:
    got = uniforms(7, [0, 1, 2], 5, Stream.PROPOSE, count)
    assert got.shape == (3, count)
    assert np.all((got >= 0) & (got < 1))
    assert got[0].tolist() != got[1].tolist()
