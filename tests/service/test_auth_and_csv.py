"""The API key as ``Authorization: Bearer`` on every verb, and CSV headers that no
spreadsheet reads as a formula."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from kameleon.service.config import Settings, hash_api_key

ProblemCheck = Callable[..., dict[str, Any]]


def test_the_key_works_as_a_bearer_token_on_every_verb(
    make_client: Callable[..., Any], assert_problem: ProblemCheck
) -> None:
    client = make_client(Settings(api_key_hashes=[hash_api_key("k1"), hash_api_key("k2")]))
    k1 = {"Authorization": "Bearer k1"}
    k2 = {"Authorization": "bearer k2"}  # the scheme is case-insensitive
    created = client.post("/v1/sessions", json={"algorithm": "rwm", "dim": 1}, headers=k1)
    assert created.status_code == 201, created.text
    base = f"/v1/sessions/{created.json()['id']}"
    ask = client.post(f"{base}/ask", json={}, headers=k1)
    assert ask.status_code == 200, ask.text
    (proposal,) = ask.json()["proposals"]
    tell_body = {"results": [{"id": proposal["id"], "log_density": -1.0}]}
    assert client.post(f"{base}/tell", json=tell_body, headers=k1).status_code == 200
    assert client.post(f"{base}/step", json={"results": []}, headers=k1).status_code == 200
    for path in (base, f"{base}/draws", f"{base}/diagnostics"):
        assert client.get(path, headers=k1).status_code == 200, path
    # Another key, as a bearer token, sees nothing of it; a wrong or malformed one is refused.
    assert_problem(client.get(base, headers=k2), 404)
    assert_problem(client.post(f"{base}/ask", json={}, headers=k2), 404)
    assert_problem(client.post(f"{base}/step", json=tell_body, headers=k2), 404)
    assert_problem(client.get(base, headers={"Authorization": "Bearer k9"}), 403)
    assert_problem(client.get(base, headers={"Authorization": "Basic azE6"}), 401)
    assert_problem(client.post(f"{base}/ask", json={}, headers={"Authorization": "Bearer"}), 401)
    assert client.delete(base, headers=k1).status_code == 204


def test_csv_headers_cannot_be_formulas(client: Any) -> None:
    names = ["=cmd|' /C calc'!A0", "+1", "-x", "@sum", "plain", 'a,"b"']
    created = client.post(
        "/v1/sessions",
        json={"algorithm": "rwm", "dim": 6, "param_names": names, "max_iterations": 3, "warmup": 0},
    )
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    answer = client.post(f"/v1/sessions/{sid}/ask", json={}).json()
    while answer["proposals"]:
        results = [{"id": p["id"], "log_density": -1.0} for p in answer["proposals"]]
        answer = client.post(f"/v1/sessions/{sid}/step", json={"results": results}).json()
    response = client.get(f"/v1/sessions/{sid}/draws", params={"format": "csv"})
    assert response.status_code == 200, response.text
    header = next(csv.reader(io.StringIO(response.text)))
    cells = header[4:]
    assert cells == ["'=cmd|' /C calc'!A0", "'+1", "'-x", "'@sum", "plain", 'a,"b"']
    assert not any(cell[:1] in "=+-@" for cell in header)
