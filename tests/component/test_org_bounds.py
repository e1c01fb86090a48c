"""What an org holds of the server's records is bounded, as its computers are by quotas: usable
API keys (`SANBOX_ORG_MAX_KEYS`, 1000) and secrets (`SANBOX_ORG_MAX_SECRETS`, 1000; each is held
by every egress proxy of the node). Past either, 422 `too_many_keys` / `too_many_secrets`, saying
what to remove, and nothing made; a revoked key or a deleted secret makes room, rotating a
secret needs none, and another org's count is its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from .conftest import local_app
from .test_api_computers import error

pytestmark = pytest.mark.component

VALUE = "sk-bounded-0123456789"


def test_an_org_holds_so_many_keys_and_secrets(short_tmp: Path) -> None:
    app, _dd = local_app(short_tmp, org_max_keys=3, org_max_secrets=2)
    with TestClient(app) as client:
        h = {"Authorization": f"Bearer {app.state.first_key}"}
        made = [client.post("/v1/keys", json={"name": f"k{i}"}, headers=h) for i in range(2)]
        assert [r.status_code for r in made] == [201, 201]  # with the first start's key: 3
        refused = client.post("/v1/keys", json={"name": "one-more"}, headers=h)
        assert error(refused) == (422, "too_many_keys"), refused.text
        assert "sanbox key revoke" in refused.json()["error"]["message"]
        names = [k["name"] for k in client.get("/v1/keys", headers=h).json()["keys"]]
        assert "one-more" not in names and len(names) == 3
        assert client.delete(f"/v1/keys/{made[0].json()['id']}", headers=h).status_code == 200
        assert client.post("/v1/keys", json={"name": "k2"}, headers=h).status_code == 201
        assert client.post("/v1/orgs", json={"name": "other"}, headers=h).status_code == 201
        theirs = client.post("/v1/keys", json={"org": "other", "admin": True}, headers=h)
        assert theirs.status_code == 201, theirs.text  # another org counts its own

        def put(name: str) -> Any:
            body = {"value": VALUE, "hosts": ["api.example.com"]}
            return client.put(f"/v1/secrets/{name}", json=body, headers=h)

        assert [put(n).status_code for n in ("a", "b")] == [200, 200]
        over = put("c")
        assert error(over) == (422, "too_many_secrets"), over.text
        listed = [s["name"] for s in client.get("/v1/secrets", headers=h).json()["secrets"]]
        assert listed == ["a", "b"]
        assert put("a").status_code == 200  # a rotation: no room
        assert client.delete("/v1/secrets/b", headers=h).status_code == 200
        assert put("c").status_code == 200
        mine = {"Authorization": f"Bearer {theirs.json()['key']}"}
        body = {"value": VALUE, "hosts": ["api.example.com"]}
        assert client.put("/v1/secrets/x", json=body, headers=mine).status_code == 200
