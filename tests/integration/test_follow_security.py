"""Issue 29: the metadata follower through the Kafka client security a cluster asks for, on a
real Kafka 4.1.1 broker that tiers (Kafka's ``LocalTieredStorage``): SASL/PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512 and OAUTHBEARER (an unsecured JWS, which the broker's default validator takes),
and mutual TLS (PEM stores), each read the same catalog as PLAINTEXT; a wrong password or an
unknown CA is ``metadata_unavailable`` (retriable), never an empty catalog."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.api.statuses import http_status
from gateway.errors import MetadataUnavailableError
from gateway.metadata.follow import FollowConfig, catch_up
from gateway.metadata.follow_kafka import connect, security_settings
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.open import open_manager
from tests.fixtures.ports import LOCALHOST, free_port
from tests.fixtures.tls import Pki
from tests.realkafka.tiering import TieringBroker

pytestmark = pytest.mark.timeout(600)

PASSWORD = "gw-secret"
_JAAS = "org.apache.kafka.common.security.{}.{} required{};"


class SaslBroker(TieringBroker):
    """A tiering broker with SASL_PLAINTEXT and SSL (client certificates required) listeners
    beside its PLAINTEXT one."""

    def __init__(self, home: Path, remote: Path, pki: Pki) -> None:
        super().__init__(home, remote)
        self.sasl_port, self.ssl_port = free_port(), free_port()
        server = pki.server()
        self.keystore = home.parent / "server.pem"  # PKCS#8 key, then the certificate
        self.keystore.write_bytes(server.key.read_bytes() + server.cert.read_bytes())
        self.ca, self.pki = pki.ca, pki

    @property
    def ssl_bootstrap(self) -> str:
        return f"{LOCALHOST}:{self.ssl_port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"{LOCALHOST}:{self.sasl_port}"

    def properties(self) -> dict[str, str]:
        p = super().properties()
        sasl = f",SASL_PLAINTEXT://{LOCALHOST}:{self.sasl_port}"
        tls = f",SSL://{LOCALHOST}:{self.ssl_port}"
        p["listeners"] += sasl + tls
        p["advertised.listeners"] += sasl + tls
        p["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL"
        p |= {
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.location": str(self.keystore),
            "listener.name.ssl.ssl.truststore.type": "PEM",
            "listener.name.ssl.ssl.truststore.location": str(self.ca),
            "listener.name.ssl.ssl.client.auth": "required",
        }
        p["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
        prefix = "listener.name.sasl_plaintext"
        plain = _JAAS.format("plain", "PlainLoginModule", f' user_gw="{PASSWORD}"')
        scram = _JAAS.format("scram", "ScramLoginModule", "")
        oauth = _JAAS.format("oauthbearer", "OAuthBearerLoginModule", "")
        p[f"{prefix}.plain.sasl.jaas.config"] = plain
        p[f"{prefix}.scram-sha-256.sasl.jaas.config"] = scram
        p[f"{prefix}.scram-sha-512.sasl.jaas.config"] = scram
        p[f"{prefix}.oauthbearer.sasl.jaas.config"] = oauth
        return p

    def format_args(self) -> list[str]:
        user = f"[name=gw,password={PASSWORD}]"
        return ["--add-scram", f"SCRAM-SHA-256={user}", "--add-scram", f"SCRAM-SHA-512={user}"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    work = tmp_path_factory.mktemp("sasl-broker")
    b = SaslBroker(work / "broker", work / "remote", Pki(work / "pki"))
    b.start()
    try:
        b.create_tiered_topic("orders")
        b.produce_segments("orders", 2)
        b.wait_uploaded("orders", 3)  # two segments and the trailer's: quiet after
        yield b
    finally:
        b.close()


def catalog(rlmm: RemoteLogMetadataManager) -> list[tuple[str, int, int | None, int | None]]:
    return sorted(
        (tp.topic, tp.partition, rlmm.log_start_offset(tp), rlmm.remote_log_end_offset(tp))
        for tp in rlmm.partitions()
    )


def unsecured_jws(subject: str) -> str:
    """A JWS with ``alg: none``: what Kafka's default OAUTHBEARER validator accepts."""

    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + 600})}."


def followed(bootstrap: str, client: dict[str, object], timeout_s: float = 60.0) -> list[object]:
    rlmm = open_manager(None)
    try:
        catch_up(rlmm, FollowConfig(bootstrap, client=client), connect, timeout_s)
        return list(catalog(rlmm))
    finally:
        rlmm.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_every_mechanism_reads_the_catalog_plaintext_reads(
    broker: SaslBroker, mechanism: str, tmp_path: Path
) -> None:
    want = followed(broker.bootstrap, {})
    assert want and want[0][:2] == ("orders", 0)
    token = tmp_path / "token"
    token.write_text(unsecured_jws("gw"))
    client = security_settings(
        "SASL_PLAINTEXT",
        mechanism,
        username="gw",
        password=PASSWORD,
        token_file=token if mechanism == "OAUTHBEARER" else None,
    )
    assert followed(broker.sasl_bootstrap, client) == want


def test_a_wrong_password_is_unavailable_never_an_empty_catalog(broker: SaslBroker) -> None:
    client = security_settings("SASL_PLAINTEXT", "PLAIN", username="gw", password="wrong")
    with pytest.raises(MetadataUnavailableError) as caught:
        followed(broker.sasl_bootstrap, client, timeout_s=10)
    assert caught.value.retriable and http_status(caught.value) == 503


def test_mutual_tls_reads_the_catalog_plaintext_reads(broker: SaslBroker, tmp_path: Path) -> None:
    pair = broker.pki.client("gw", CN="gw")
    client = security_settings("SSL", None, cafile=broker.ca, certfile=pair.cert, keyfile=pair.key)
    assert followed(broker.ssl_bootstrap, client) == followed(broker.bootstrap, {})
    other = Pki(tmp_path / "other")  # a CA that did not sign the broker's certificate
    strange = security_settings("SSL", None, cafile=other.ca, certfile=pair.cert, keyfile=pair.key)
    with pytest.raises(MetadataUnavailableError):
        followed(broker.ssl_bootstrap, strange, timeout_s=10)
