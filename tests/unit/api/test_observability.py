"""What an operator sees: /metrics (build info, per-topic counters, no ``_created`` series),
the request id, the typed 500 in the schema, and /docs and /redoc that work offline."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway import __version__
from gateway.api.build import UNKNOWN, build_commit
from gateway.api.logs import new_request_id
from gateway.errors import KeyNotConfiguredError
from tests.fakes.orders import TOPIC
from tests.fakes.service import FakeService

RECORDS = "/v1/topics/{topic}/partitions/0/records"


def _samples(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of the samples of ``name`` (labels in name order)."""
    found = re.findall(rf"^{name}\{{(.*)\}} (\S+)$", text, re.MULTILINE)
    return {labels: float(value) for labels, value in found}


def test_metrics_have_no_created_series(client: TestClient) -> None:
    client.get(RECORDS.format(topic=TOPIC), params={"offset": 0})
    text = client.get("/metrics").text
    assert "tiered_gateway_http_request_duration_seconds_count" in text
    assert "tiered_gateway_topic_requests_total" in text
    assert "_created" not in text


def test_metrics_name_the_build(client: TestClient) -> None:
    (labels,) = _samples(client.get("/metrics").text, "tiered_gateway_build_info")
    assert f'version="{__version__}"' in labels
    commit = re.search(r'commit="([^"]*)"', labels)
    assert commit is not None and commit.group(1) == build_commit()
    assert commit.group(1) == UNKNOWN or re.fullmatch(r"[0-9a-f]{40}", commit.group(1))


def _value(text: str, name: str) -> float:
    (value,) = re.findall(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(value)


def test_metrics_show_what_admission_admitted_and_shed(client: TestClient) -> None:
    """The byte budget and the gate of pages, as the worker answering sees them: a JSON page
    takes its bytes and a turn, a raw answer its bytes only; none is in flight after."""
    client.get(RECORDS.format(topic=TOPIC), params={"offset": 0})
    raw = {"Accept": "application/octet-stream"}
    client.get(RECORDS.format(topic=TOPIC), params={"offset": 0}, headers=raw)
    text = client.get("/metrics").text
    assert _value(text, "tiered_gateway_inflight_admitted_total") == 2
    assert _value(text, "tiered_gateway_pages_admitted_total") == 1
    for name in ("inflight_waited", "inflight_refused", "pages_refused", "pages_refused_late"):
        assert _value(text, f"tiered_gateway_{name}_total") == 0, name
    assert _value(text, "tiered_gateway_inflight_bytes") == 0
    assert _value(text, "tiered_gateway_pages_active") == 0
    assert _value(text, "tiered_gateway_inflight_bytes_limit") > 0
    assert _value(text, "tiered_gateway_pages_active_limit") > 0
    assert _value(text, "tiered_gateway_event_loop_lag_seconds") >= 0


def test_requests_and_bytes_are_counted_per_topic_endpoint_and_outcome(
    client: TestClient,
) -> None:
    """Topics the catalog holds are labels; any other name a client sends (however many) is
    counted under one ``<other>`` label, so clients cannot grow the label space."""
    ok = client.get(RECORDS.format(topic=TOPIC), params={"offset": 0})
    client.get(RECORDS.format(topic=TOPIC), params={"offset": 0})
    missing = client.get(f"/v1/topics/{TOPIC}/partitions/9")
    for name in ("nosuch", "other-one", "x" * 200):
        client.get(RECORDS.format(topic=name), params={"offset": 0})
    client.get("/v1/topics")  # no topic in the route: not counted per topic
    text = client.get("/metrics").text
    requests = _samples(text, "tiered_gateway_topic_requests_total")
    sent = _samples(text, "tiered_gateway_topic_response_bytes_total")
    records_ok = 'endpoint="get_records",outcome="ok",topic="orders"'
    assert requests[records_ok] == 2
    assert sent[records_ok] == 2 * len(ok.content)
    partition_404 = 'endpoint="get_partition",outcome="client_error",topic="orders"'
    assert requests[partition_404] == 1 and sent[partition_404] == len(missing.content)
    assert requests['endpoint="get_records",outcome="client_error",topic="<other>"'] == 3
    assert {re.search(r'topic="([^"]*)"', k).group(1) for k in requests} == {  # type: ignore[union-attr]
        "orders",
        "<other>",
    }


def test_before_the_catalog_is_loaded_every_topic_is_other(
    client: TestClient, fake: FakeService
) -> None:
    fake.is_ready = False
    assert client.get(RECORDS.format(topic=TOPIC), params={"offset": 0}).status_code == 503
    requests = _samples(client.get("/metrics").text, "tiered_gateway_topic_requests_total")
    assert requests == {'endpoint="get_records",outcome="server_error",topic="<other>"': 1}


def test_every_response_carries_a_request_id(client: TestClient) -> None:
    given = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    fresh = client.get("/healthz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", fresh)
    assert client.get("/healthz").headers["x-request-id"] != fresh
    refused = client.get("/healthz", headers={"X-Request-ID": "no spaces\tor tabs"})
    assert re.fullmatch(r"[0-9a-f]{32}", refused.headers["x-request-id"])


@pytest.mark.parametrize("given", ["", "a" * 65, "bad id", "é"])
def test_a_client_request_id_that_is_no_short_token_is_replaced(given: str) -> None:
    assert new_request_id(given) != given


def test_the_schema_documents_the_500_key_not_configured(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    responses = schema["paths"]["/v1/topics/{topic}/partitions/{partition}/records"]["get"][
        "responses"
    ]
    assert "key_not_configured" in responses["500"]["description"]
    assert "--key-pair" in responses["500"]["description"]
    ref = responses["500"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/ErrorBody")


def test_a_segment_wrapped_by_an_unconfigured_key_is_the_typed_500(
    client: TestClient, fake: FakeService
) -> None:
    fake.fail["fetch"] = KeyNotConfiguredError(
        "unknown key pair id 'k2' (configured: 'k1'): add --key-pair k2=PATH"
    )
    r = client.get(RECORDS.format(topic=TOPIC), params={"offset": 0})
    assert r.status_code == 500
    body = r.json()
    assert (body["error_code"], body["retriable"]) == ("key_not_configured", False)
    assert "--key-pair k2=PATH" in body["message"]


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value:
                self.urls.append(value)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_their_assets_from_the_gateway(client: TestClient, page: str) -> None:
    """Offline, a CDN script is a blank page: every script, style and icon is served here."""
    r = client.get(page)
    assert r.status_code == 200
    parser = _Assets()
    parser.feed(r.text)
    script_urls = re.findall(r"""url:\s*['"]([^'"]+)['"]""", r.text)  # swagger's openapi url
    assert parser.urls, r.text
    for url in parser.urls + script_urls:
        assert url.startswith("/"), f"{page} loads {url} from elsewhere"
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.content, url
    assert "cdn" not in r.text.lower()


def test_the_image_s_build_commit_file(tmp_path: Path) -> None:
    """The container image writes its REVISION into the environment's prefix."""
    from gateway.api.build import COMMIT_FILE, _from_prefix  # noqa: PLC0415

    assert _from_prefix(tmp_path) is None
    (tmp_path / COMMIT_FILE).write_text("0123456789abcdef0123456789abcdef01234567\n")
    assert _from_prefix(tmp_path) == "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / COMMIT_FILE).write_text("unknown\n")  # a build without a revision
    assert _from_prefix(tmp_path) is None
