from __future__ import annotations


def test_health_reports_database_and_redis_as_json(client, db):
    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["redis"]["ok"] is True
    assert "workers" in body["worker"]


def test_health_is_unavailable_when_redis_is_down(client, db, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["redis"]["ok"] is False
