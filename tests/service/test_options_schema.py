"""Each algorithm's options in the OpenAPI document agree with the sampler and the service.

The schemas are read off the samplers' ``Params`` dataclasses; these tests check that
every option is there with its type, default and description, and that a body the
schema accepts or refuses is accepted or refused by the service in the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from kameleon.core import DEFAULT_ALGORITHM, SAMPLERS
from kameleon.service.openapi import document
from kameleon.service.option_schemas import FIXED, schema_name

SPEC = document()
SCHEMAS = SPEC["components"]["schemas"]


def _validator() -> jsonschema.protocols.Validator:
    """A validator of SessionCreate bodies that resolves the document's references."""
    schema = {**SCHEMAS["SessionCreate"], "components": SPEC["components"]}
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)  # type: ignore[no-any-return]


VALIDATOR = _validator()


@pytest.mark.parametrize("algorithm", list(SAMPLERS))
def test_every_option_is_documented_with_its_default(algorithm: str) -> None:
    schema = SCHEMAS[schema_name(algorithm)]
    params = SAMPLERS[algorithm].Params
    fields = {f.name: f for f in dataclasses.fields(params) if f.init and f.name not in FIXED}
    assert set(schema["properties"]) == set(fields)
    assert schema["additionalProperties"] is False
    for name, prop in schema["properties"].items():
        assert prop["default"] == fields[name].default, name
        assert len(prop["description"]) > 20, name  # says what it does, not just its name


def _defaults(algorithm: str) -> dict[str, Any]:
    props = SCHEMAS[schema_name(algorithm)]["properties"]
    return {k: p["default"] for k, p in props.items() if p["default"] is not None}


@pytest.mark.parametrize("algorithm", list(SAMPLERS))
def test_schema_and_service_accept_the_defaults_spelled_out(
    module_client: TestClient, algorithm: str
) -> None:
    # sgld's data_size has no usable default (the number of data points is required).
    options = {**_defaults(algorithm), **({"data_size": 1000} if algorithm == "sgld" else {})}
    body = {"algorithm": algorithm, "dim": 2, "chains": 1, "options": options}
    VALIDATOR.validate(body)
    response = module_client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    assert module_client.delete(f"/v1/sessions/{response.json()['id']}").status_code == 204


@pytest.mark.parametrize("algorithm", list(SAMPLERS))
def test_schema_and_service_refuse_another_algorithms_option(
    module_client: TestClient, algorithm: str
) -> None:
    own = set(SCHEMAS[schema_name(algorithm)]["properties"])
    foreign = sorted({k for a in SAMPLERS for k in _defaults(a)} - own)
    assert foreign
    for name in foreign:
        other = next(a for a in SAMPLERS if name in _defaults(a))
        body = {
            "algorithm": algorithm,
            "dim": 2,
            "options": {name: _defaults(other)[name]},
        }
        assert not VALIDATOR.is_valid(body), name
        response = module_client.post("/v1/sessions", json=body)
        assert response.status_code == 422, response.text
        assert name in response.json()["detail"]


def test_without_an_algorithm_the_defaults_options_apply(module_client: TestClient) -> None:
    own = set(SCHEMAS[schema_name(DEFAULT_ALGORITHM)]["properties"])
    foreign = next(k for a in SAMPLERS for k in _defaults(a) if k not in own)
    assert VALIDATOR.is_valid({"dim": 2, "options": _defaults(DEFAULT_ALGORITHM)})
    assert not VALIDATOR.is_valid({"dim": 2, "options": {foreign: 1}})
    response = module_client.post("/v1/sessions", json={"dim": 2, "options": {foreign: 1}})
    assert response.status_code == 422, response.text


def test_a_wrong_type_is_refused_by_both(module_client: TestClient) -> None:
    body = {"algorithm": "am", "dim": 2, "options": {"nugget": "small"}}
    assert not VALIDATOR.is_valid(body)
    assert module_client.post("/v1/sessions", json=body).status_code == 422
