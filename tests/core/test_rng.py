"""Counter-based randomness: a pure function of (seed, chain, iteration, stream)."""

from __future__ import annotations

import numpy as np
import pytest

from kameleon.core.numerics.rng import MAX_SEED, Stream, fresh_generator, generator, substream


@pytest.mark.parametrize("args", [(0, 0, 0, 0), (1, 2, 3, 1), (MAX_SEED, 4095, 10**12, 3)])
def test_reused_generator_equals_a_fresh_one(args: tuple[int, int, int, int]) -> None:
    fresh = fresh_generator(*args)
    expected = (fresh.standard_normal(7), fresh.random(3), fresh.integers(0, 100, 5))
    gen = generator(*args)
    got = (gen.standard_normal(7), gen.random(3), gen.integers(0, 100, 5))
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_same_arguments_same_numbers_whatever_came_before() -> None:
    first = generator(5, 1, 9, Stream.PROPOSE).standard_normal(4)
    generator(5, 1, 10, Stream.PROPOSE).standard_normal(100)  # moves the shared object
    again = generator(5, 1, 9, Stream.PROPOSE).standard_normal(4)
    np.testing.assert_array_equal(first, again)


def test_streams_are_kept_apart() -> None:
    propose = generator(5, 1, 9, Stream.PROPOSE)
    accept = generator(5, 1, 9, Stream.ACCEPT)  # another stream: propose stays valid
    a, b = propose.random(4), accept.random(4)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, fresh_generator(5, 1, 9, Stream.PROPOSE).random(4))


@pytest.mark.parametrize("step", [0, 1, 7, 10**6])
def test_a_substream_gives_a_fresh_generators_numbers(step: int) -> None:
    # Substreams share one kept generator: each call still gives its own stream's numbers.
    stream = substream(Stream.ACCEPT, step)
    expected = fresh_generator(3, 2, 11, stream).random(5)
    generator(3, 2, 11, substream(Stream.ACCEPT, step + 1)).random(50)  # moves the shared one
    np.testing.assert_array_equal(generator(3, 2, 11, stream).random(5), expected)
    assert not np.array_equal(generator(3, 2, 11, Stream.ACCEPT).random(5), expected)


def test_different_counters_give_different_numbers() -> None:
    draws = {
        tuple(fresh_generator(*args).random(2))
        for args in [(1, 0, 0, 0), (1, 1, 0, 0), (1, 0, 1, 0), (1, 0, 0, 1), (2, 0, 0, 0)]
    }
    assert len(draws) == 5


@pytest.mark.parametrize(
    "bad", [(-1, 0, 0, 0), (0, -1, 0, 0), (0, 0, -1, 0), (MAX_SEED + 1, 0, 0, 0)]
)
def test_out_of_range_is_an_error(bad: tuple[int, int, int, int]) -> None:
    with pytest.raises(ValueError):
        generator(*bad)
