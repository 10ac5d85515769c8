"""Every ``.rsm-manifest`` the real Aiven plugin (v1.0.0, on a Kafka 4.1.1 broker) wrote into
``tests/fixtures/real_kafka``: parsed, and written back byte for byte (issue 28: the writer had
dropped the ``txnIdxEmpty`` a 4.x broker's metadata carries)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.metadata.manifests import txn_index_empty
from gateway.remote.manifest import parse_manifest
from gateway.remote.manifest_writer import serialize_manifest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real_kafka"
MANIFESTS = sorted(FIXTURES.glob("*/bucket/**/*.rsm-manifest"))


def test_the_fixtures_hold_real_manifests() -> None:
    assert len(MANIFESTS) >= 100
    assert any(b'"encryption"' in p.read_bytes() for p in MANIFESTS)
    assert any(b'"type":"variable"' in p.read_bytes() for p in MANIFESTS)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_a_real_manifest_round_trips_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    manifest = parse_manifest(data, str(path))
    assert serialize_manifest(manifest) == data
    meta = manifest.remote_log_segment_metadata
    assert meta is not None and meta.txn_idx_empty is not None
    assert txn_index_empty(manifest) is meta.txn_idx_empty
    assert meta.txn_idx_empty is (manifest.segment_indexes.transaction is None)
