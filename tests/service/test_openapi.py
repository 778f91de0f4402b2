"""openapi.yaml, the app and the protocol stay in step."""

from __future__ import annotations

from pathlib import Path

import yaml

from kameleon.service.openapi import document, render

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "kameleon openapi -o openapi.yaml"

#: The endpoint table of the protocol (PROTOCOL.md, v1).
PROTOCOL = {
    ("post", "/v1/sessions"),
    ("get", "/v1/sessions"),
    ("get", "/v1/sessions/{session_id}"),
    ("patch", "/v1/sessions/{session_id}"),
    ("delete", "/v1/sessions/{session_id}"),
    ("post", "/v1/sessions/{session_id}/ask"),
    ("post", "/v1/sessions/{session_id}/tell"),
    ("post", "/v1/sessions/{session_id}/step"),
    ("post", "/v1/sessions/{session_id}/leases"),
    ("get", "/v1/sessions/{session_id}/draws"),
    ("get", "/v1/sessions/{session_id}/diagnostics"),
    ("get", "/v1/sessions/{session_id}/trace"),
    ("get", "/v1/sessions/{session_id}/weights"),
    ("post", "/v1/consensus"),
    ("get", "/v1/health"),
}
#: Endpoints beyond the protocol's table, each documented in openapi.yaml.
EXTENSIONS = {
    ("post", "/v1/sessions/{session_id}/chains/{chain}/reset"),
    ("get", "/v1/health/live"),
    ("get", "/v1/health/ready"),
}


def _operations(spec: dict) -> set[tuple[str, str]]:
    return {(method, path) for path, item in spec["paths"].items() for method in item}


def test_committed_file_equals_the_app() -> None:
    committed = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    app = document()
    assert _operations(committed) == _operations(app), f"run `{REGENERATE}`"
    assert committed["components"]["schemas"] == app["components"]["schemas"], (
        f"schemas differ: run `{REGENERATE}`"
    )
    assert committed == app, f"run `{REGENERATE}`"


def test_render_round_trips() -> None:
    assert yaml.safe_load(render()) == document()


def test_app_serves_exactly_the_protocol() -> None:
    assert _operations(document()) == PROTOCOL | EXTENSIONS


def test_every_operation_documents_its_errors_as_problem_json() -> None:
    for path, item in document()["paths"].items():
        for method, op in item.items():
            if path.startswith("/v1/health"):  # no key, no body, no store error
                continue
            codes = set(op["responses"])
            assert {"401", "403", "413", "503"} <= codes, (method, path)
            for code in codes - {"200", "201", "204", "304"}:  # 304: no body
                content = op["responses"][code].get("content", {})
                assert "application/problem+json" in content, (method, path, code)


def test_the_schema_states_the_limits_the_service_enforces() -> None:
    """The maxima are the settings' (the defaults in openapi.yaml; a running service's
    own in its /v1/openapi.json), not the largest exact JSON integer."""
    from kameleon.service.app import create_app
    from kameleon.service.config import Settings

    defaults = Settings()
    schemas = document()["components"]["schemas"]
    assert schemas["SessionCreate"]["properties"]["dim"]["maximum"] == defaults.max_dim
    assert schemas["SessionCreate"]["properties"]["chains"]["maximum"] == defaults.max_chains
    assert schemas["AskRequest"]["properties"]["max"]["maximum"] == defaults.max_ask
    waits = schemas["StepRequest"]["properties"]["wait_seconds"]
    assert waits["maximum"] == defaults.max_wait_seconds
    mine = create_app(Settings(max_dim=50)).openapi()["components"]["schemas"]
    assert mine["SessionCreate"]["properties"]["dim"]["maximum"] == 50
