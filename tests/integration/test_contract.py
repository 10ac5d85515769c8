"""openapi.yaml against a real ``serve`` on the demo bucket (issue 16): schemathesis generates
requests for every operation, with valid credentials and with none; every response must
conform to the contract (status documented, body and headers as declared) and none may be a
5xx. Authentication is on (an API key; ACLs allow that key every topic), so the anonymous
run walks the 401 answers and the credentialed run the data."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig

from gateway.demo import DemoBucket
from tests.fixtures.secured import write_security_files
from tests.integration.serve import start_serve, stop

OPENAPI = Path(__file__).parents[2] / "openapi.yaml"
ACL = """\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)`:
 \t(principal=User:contract, host=*, operation=READ, permissionType=ALLOW)
Current ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)`:
 \t(principal=User:contract, host=*, operation=DESCRIBE, permissionType=ALLOW)
"""  # noqa: E501 - the lines as kafka-acls prints them
EXAMPLES = 30  # per operation and run
CLIENT_DEADLINE_MS = 1000  # a 504 for a deadline this short is the client's choice, not a fault

# Schema-valid requests that the data may still refuse, each with its documented code: 416 (an
# offset past the remote end), 422 (a record not valid in the asked format, e.g. json), 504 (a
# deadline the request asked for and that passed: no_server_fault allows it for short ones only).
ACCEPTED = ["2xx", "401", "403", "404", "416", "422", "429", "504"]
CONFIG = SchemathesisConfig.from_dict(
    {"checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}}}
)
schema = schemathesis.openapi.from_path(OPENAPI, config=CONFIG)


def no_server_fault(
    ctx: object, response: schemathesis.Response, case: schemathesis.Case[Any]
) -> None:
    """No 5xx, but a 504 ``deadline_exceeded`` for a deadline of at most
    :data:`CLIENT_DEADLINE_MS` that the request itself asked for."""
    if response.status_code < 500:
        return
    timeout = str((case.query or {}).get("timeout_ms", ""))
    asked = timeout.isdigit() and int(timeout) <= CLIENT_DEADLINE_MS
    if response.status_code == 504 and asked and b"deadline_exceeded" in response.content:
        return
    raise AssertionError(f"server error {response.status_code}: {response.content[:300]!r}")


def _validate(case: schemathesis.Case[Any], url: str, headers: dict[str, Any]) -> None:
    case.call_and_validate(
        base_url=url,
        headers=headers,
        additional_checks=[no_server_fault],
        excluded_checks=[not_a_server_error],
    )


@dataclass(frozen=True, slots=True)
class Server:
    url: str
    key: str


@pytest.fixture(scope="module")
def server(demo: DemoBucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("contract")
    files = write_security_files(work, ACL, None, users=("contract",))
    key = files.api_keys["contract"]
    args = [*demo.serve_args, "--rescan-interval-s", "0", *files.serve_args()]
    proc, url = start_serve(args, work / "serve.log")
    try:
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/readyz").status_code != 200:
            assert time.monotonic() < deadline, (work / "serve.log").read_text()
            time.sleep(0.05)
        yield Server(url, key)
    finally:
        stop(proc)


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@schema.parametrize()
@_SETTINGS
def test_with_credentials(case: schemathesis.Case, server: Server) -> None:
    _validate(case, server.url, {"X-API-Key": server.key})


@schema.parametrize()
@_SETTINGS
def test_without_credentials(case: schemathesis.Case, server: Server) -> None:
    _validate(case, server.url, {})
