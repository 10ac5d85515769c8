"""The follower's settings: each security protocol and mechanism as kafka-python's client
settings, a mechanism without what it needs refused at start, and ``metadata_source`` topic
refused without a cluster to follow."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider

from gateway.config import load_settings
from gateway.errors import ConfigurationError
from gateway.metadata.follow_kafka import security_settings


def test_plaintext_is_the_default() -> None:
    assert security_settings("PLAINTEXT", None) == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_password_mechanisms(mechanism: str, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    got = security_settings("SASL_SSL", mechanism, username="u", password="p", cafile=ca)
    assert got == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
        "ssl_cafile": str(ca),
    }


def test_oauthbearer_reads_its_token_file_at_each_login(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    got = security_settings("SASL_PLAINTEXT", "OAUTHBEARER", token_file=token)
    provider = got["sasl_oauth_token_provider"]
    assert isinstance(provider, AbstractTokenProvider) and provider.token() == "first"
    token.write_text("renewed")
    assert provider.token() == "renewed"


def test_mutual_tls_files(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    got = security_settings("SSL", None, certfile=cert, keyfile=key)
    assert got == {"security_protocol": "SSL", "ssl_certfile": str(cert), "ssl_keyfile": str(key)}


@pytest.mark.parametrize(
    ("protocol", "mechanism", "kwargs", "match"),
    [
        ("SASL_SSL", None, {}, "needs a mechanism"),
        ("SASL_PLAINTEXT", "PLAIN", {"username": "u"}, "username and a password"),
        ("SASL_SSL", "OAUTHBEARER", {}, "metadata_oauth_token_file"),
    ],
)
def test_incomplete_settings_are_refused(
    protocol: str, mechanism: str | None, kwargs: dict[str, str], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        security_settings(protocol, mechanism, **kwargs)  # type: ignore[arg-type]


def test_following_needs_a_cluster() -> None:
    with pytest.raises(ConfigurationError, match="metadata_bootstrap"):
        load_settings({"store": "file:///x", "metadata_source": "topic"})
    assert load_settings({"store": "file:///x"}).follow_config() is None


def test_the_follow_config_from_settings() -> None:
    settings = load_settings(
        {
            "store": "file:///x",
            "metadata_source": "both",
            "metadata_bootstrap": "a:9092,b:9092",
            "metadata_topics": ["orders"],
            "metadata_security_protocol": "SASL_PLAINTEXT",
            "metadata_sasl_mechanism": "SCRAM-SHA-512",
            "metadata_sasl_username": "gw",
            "metadata_sasl_password": "secret",
        }
    )
    config = settings.follow_config()
    assert config is not None
    assert (config.bootstrap, config.topic, config.served_topics) == (
        "a:9092,b:9092",
        "__remote_log_metadata",
        ("orders",),
    )
    assert config.client["sasl_mechanism"] == "SCRAM-SHA-512"
