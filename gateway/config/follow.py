"""Following a cluster's ``__remote_log_metadata`` topic (``docs/live-metadata.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode

if TYPE_CHECKING:  # the follower and its Kafka client load only where one follows
    from gateway.metadata.follow import FollowConfig


class FollowSettings(BaseModel):
    """Where the catalog comes from, and the client that follows the metadata topic."""

    # --- following a cluster's __remote_log_metadata (docs/live-metadata.md) ------------------
    metadata_source: Literal["bucket", "topic", "both"] = Field(
        default="bucket",
        description="where the catalog comes from: bucket (scans of the manifests), topic "
        "(follow the cluster's __remote_log_metadata: uploads seen at once, no listing), or "
        "both (the topic for every segment it names, scans for the rest)",
    )
    metadata_bootstrap: str | None = Field(
        default=None, description="the cluster's bootstrap servers (HOST:PORT,...) to follow"
    )
    metadata_topic_name: str = Field(
        default="__remote_log_metadata", min_length=1, description="the metadata topic"
    )
    metadata_topics: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="follow only the metadata partitions of these topics (default: every "
        "partition of the metadata topic)",
    )
    metadata_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="the follower's Kafka security protocol"
    )
    metadata_sasl_mechanism: (
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None
    ) = Field(default=None, description="the follower's SASL mechanism")
    metadata_sasl_username: str | None = Field(default=None, description="SASL PLAIN/SCRAM user")
    metadata_sasl_password: str | None = Field(
        default=None, description="SASL PLAIN/SCRAM password"
    )
    metadata_oauth_token_file: Path | None = Field(
        default=None, description="OAUTHBEARER: a file holding the token, read at each login"
    )
    metadata_ssl_cafile: Path | None = Field(default=None, description="CA bundle of the cluster")
    metadata_ssl_certfile: Path | None = Field(
        default=None, description="client certificate (mutual TLS)"
    )
    metadata_ssl_keyfile: Path | None = Field(default=None, description="its private key")

    def follow_config(self) -> FollowConfig | None:
        """The metadata topic to follow (``metadata_source`` topic or both), else None."""
        if self.metadata_source == "bucket" or not self.metadata_bootstrap:
            return None
        from gateway.metadata.follow import FollowConfig  # noqa: PLC0415
        from gateway.metadata.follow_kafka import security_settings  # noqa: PLC0415

        client = security_settings(
            self.metadata_security_protocol,
            self.metadata_sasl_mechanism,
            username=self.metadata_sasl_username,
            password=self.metadata_sasl_password,
            token_file=self.metadata_oauth_token_file,
            cafile=self.metadata_ssl_cafile,
            certfile=self.metadata_ssl_certfile,
            keyfile=self.metadata_ssl_keyfile,
        )
        return FollowConfig(
            self.metadata_bootstrap,
            self.metadata_topic_name,
            tuple(self.metadata_topics),
            client,
        )
