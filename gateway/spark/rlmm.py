"""The RLMM one read plans from, on the driver: a ``catalog`` (a ``--state-dir``) without any
listing, the cluster's ``__remote_log_metadata`` read to its end (``metadataBootstrap``), or a
scan of the bucket into memory, with the manifests the scan could not read (:data:`Claims`).
Executors never list."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.errors import ConfigurationError, UnknownTopicOrPartitionError
from gateway.metadata.follow import FollowConfig
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import TopicIdPartition
from gateway.service.locate import Claim
from gateway.spark.read_options import ReadOptions

Claims = Mapping[TopicIdPartition, Sequence[Claim]]
"""Manifests the bucket scan could not read, by partition: their offsets stay claimed."""


def load_metadata(opts: ReadOptions) -> RemoteLogMetadataManager:
    """The RLMM of the read: the catalog when one is given, else a scan of the bucket."""
    return load_with_claims(opts)[0]


def _follow_config(opts: ReadOptions, bootstrap: str) -> FollowConfig:
    """The metadata topic to plan from: its partitions of the named topics only (every
    partition for a pattern), the client's security from the driver's environment."""
    from gateway.config import load_command_settings  # noqa: PLC0415

    named = list(opts.subscription.topics)
    given: dict[str, object] = {"metadata_source": "topic", "metadata_bootstrap": bootstrap}
    if named:
        given["metadata_topics"] = named
    config = load_command_settings(given).follow_config()
    assert config is not None
    return config


def load_with_claims(opts: ReadOptions) -> tuple[RemoteLogMetadataManager, Claims]:
    """The RLMM and the unreadable manifests the scan found (none known from a catalog). A
    scan that finds no manifest under the prefix raises
    :class:`UnknownTopicOrPartitionError` with the diagnosis of the scope."""
    from gateway.metadata.bucket import follow_topic, scan_bucket  # noqa: PLC0415
    from gateway.metadata.open import open_manager  # noqa: PLC0415

    if opts.catalog is not None:
        path = Path(opts.catalog)
        if not path.is_dir():
            raise ConfigurationError(f"option catalog={opts.catalog!r}: not a directory")
        return open_manager(path), {}
    rlmm = open_manager(None)
    spec = opts.store
    if opts.metadata_bootstrap is not None:
        try:
            asyncio.run(
                follow_topic(
                    rlmm, _follow_config(opts, opts.metadata_bootstrap), spec.url,
                    key_prefix=opts.key_prefix, key_pairs=opts.key_pairs,
                    endpoint_url=spec.endpoint_url, region=spec.region,
                    path_style=spec.path_style,
                )
            )  # fmt: skip
        except BaseException:
            rlmm.close()
            raise
        return rlmm, {}
    try:
        scan = asyncio.run(
            scan_bucket(
                rlmm, spec.url, key_prefix=opts.key_prefix, key_pairs=opts.key_pairs,
                endpoint_url=spec.endpoint_url, region=spec.region, path_style=spec.path_style,
            )
        )  # fmt: skip
    except BaseException:
        rlmm.close()
        raise
    if not scan.report.manifests:  # a wrong keyPrefix: say what lies around it
        rlmm.close()
        raise UnknownTopicOrPartitionError(
            f"{opts.subscription.describe()}: {scan.report.scope_warning}"
        )
    return rlmm, scan.claims()
