"""The UM-Bridge driver refuses, before evaluating anything, a session whose asks a
model that gives one log density per point cannot answer."""

from __future__ import annotations

from typing import Any

import pytest

from kameleon.core import SAMPLERS
from kameleon.umbridge import _check_answerable, unanswerable

CONDITIONAL = {"blocks": [{"indices": [0]}, {"indices": [1], "conditional": True}]}


@pytest.mark.parametrize(
    ("algorithm", "options", "named"),
    [
        ("sgld", {"data_size": 10}, "minibatch"),
        ("tempering", {"tempered": "likelihood"}, "log prior and the log likelihood"),
        ("smc", {"tempered": "likelihood"}, "log prior and the log likelihood"),
        ("gibbs", CONDITIONAL, "full conditional"),
    ],
)
def test_sessions_that_ask_for_more_than_a_value_are_refused(
    algorithm: str, options: dict[str, Any], named: str
) -> None:
    why = unanswerable(algorithm, options)
    assert why is not None and named in why
    with pytest.raises(ValueError, match="one log density per point"):
        _check_answerable(algorithm, options)


@pytest.mark.parametrize("algorithm", sorted(set(SAMPLERS) - {"sgld"}))
def test_every_other_algorithm_with_its_defaults_is_driven(algorithm: str) -> None:
    assert unanswerable(algorithm, {}) is None
    _check_answerable(algorithm, {})


def test_reference_tempering_and_gibbs_without_conditional_blocks_are_driven() -> None:
    assert unanswerable("tempering", {"tempered": "reference"}) is None
    assert unanswerable("gibbs", {"blocks": [{"indices": [0]}, {"indices": [1]}]}) is None
