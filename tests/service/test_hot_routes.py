"""The hot routes (ask, tell, step): ordinary routes of the one app, declared like any."""

from __future__ import annotations

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute

from kameleon.service.app import create_app
from kameleon.service.config import Settings
from kameleon.service.deps import OwnerDep, SessionsDep
from kameleon.service.routes.hot import HotRoute
from kameleon.service.schemas import AskRequest


def test_the_hot_routes_come_first_on_the_app_router() -> None:
    app = create_app(Settings())
    first = app.router.routes[:3]
    assert all(isinstance(route, HotRoute) for route in first)
    assert sorted(route.name for route in first) == ["ask", "step", "tell"]
    assert {route.path for route in first} == {
        f"/v1/sessions/{{session_id}}/{name}" for name in ("ask", "tell", "step")
    }
    # Only the declaration feeds the OpenAPI document: the body models are there.
    spec = app.openapi()
    body = spec["paths"]["/v1/sessions/{session_id}/step"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/StepRequest"
    }


def test_a_hot_endpoint_takes_the_documented_parameters() -> None:
    router = APIRouter(route_class=HotRoute)

    async def wrong(session_id: str, payload: AskRequest, sessions: SessionsDep) -> None:
        return None

    with pytest.raises(TypeError, match="takes"):
        router.post("/x/{session_id}")(wrong)

    async def not_a_model(
        session_id: str, body: dict[str, int], sessions: SessionsDep, owner: OwnerDep
    ) -> None:
        return None

    with pytest.raises(TypeError, match="pydantic model"):
        router.post("/y/{session_id}")(not_a_model)
    assert not [r for r in router.routes if isinstance(r, APIRoute)]
