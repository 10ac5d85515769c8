"""An empty scan scope is diagnosed (pure), logged once by the scanner; listings say which
segments are displaced."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.metadata.backend import MemoryBackend
from gateway.metadata.listing import list_segments
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import SegmentState
from gateway.metadata.scan import BucketScanner
from gateway.metadata.scope import (
    Surroundings,
    diagnose_empty_scope,
    look_around,
    parent_folder,
)
from gateway.storage.filesystem import FilesystemStore
from tests.unit.metadata.helpers import TP, seg_id, segment, update

MANIFEST = (
    "t/orders-AAAAAAAAAAAAAAAAAAAAAQ/0/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAQ.rsm-manifest"
)


@pytest.fixture
def rlmm() -> Iterator[RemoteLogMetadataManager]:
    manager = RemoteLogMetadataManager(MemoryBackend())
    yield manager
    manager.close()


@pytest.mark.parametrize(
    ("prefix", "folder"),
    [("", ""), ("t", ""), ("t/", ""), ("a/b/", "a/"), ("a/b", "a/"), ("a/b/c/", "a/b/")],
)
def test_parent_folder(prefix: str, folder: str) -> None:
    assert parent_folder(prefix) == folder


def test_a_missing_slash_is_named_with_its_fix() -> None:
    message = diagnose_empty_scope("tiered", misprefixed=27, around=None)
    assert message == (
        "no remote segment found under the key prefix 'tiered': 27 manifests are under "
        "'tiered/', outside the key prefix 'tiered' (it lacks its trailing '/'); did you mean "
        "the key prefix 'tiered/'?"
    )


def test_the_nearest_manifest_prefixes_are_suggested() -> None:
    around = Surroundings("", {"tiered/": 27, "other/": 3, "x/y/": 1})
    message = diagnose_empty_scope("tierd/", misprefixed=0, around=around)
    assert message.endswith("did you mean the key prefix 'tiered/' (27 manifests)?")
    far = diagnose_empty_scope("zzz/", misprefixed=0, around=around)
    assert far.endswith(
        "'tiered/' (27 manifests) or 'other/' (3 manifests) or 'x/y/' (1 manifest)?"
    )


def test_a_folder_without_manifests_lists_what_it_holds() -> None:
    around = Surroundings("", {}, ("logs/", "readme.txt"), missing_folder="/data/bucket/tierd")
    message = diagnose_empty_scope("tierd/", misprefixed=0, around=around)
    assert message == (
        "no remote segment found under the key prefix 'tierd/': the folder /data/bucket/tierd "
        "does not exist; no .rsm-manifest in the bucket, which holds 'logs/', 'readme.txt'"
    )
    assert diagnose_empty_scope("", misprefixed=0, around=Surroundings()) == (
        "no remote segment found under the bucket: the bucket is empty"
    )
    failed = diagnose_empty_scope("a/", misprefixed=0, around=Surroundings(error="boom"))
    assert failed.endswith("(listing the bucket failed: boom)")


async def test_look_around_lists_one_folder(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path)
    await store.put(MANIFEST, b"{}")
    await store.put("notes/readme.txt", b"")
    around = await look_around(store, "tt/")
    assert around.folder == ""
    assert dict(around.manifest_prefixes) == {"t/": 1}
    assert around.entries == ("notes/", "t/")
    assert around.missing_folder == str(tmp_path / "tt")


async def test_the_scanner_warns_once_about_an_empty_scope(
    tmp_path: Path, rlmm: RemoteLogMetadataManager, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve`` runs the scanner: a wrong prefix is one warning in its log, not silence and
    not one warning per rescan."""
    store = FilesystemStore(tmp_path)
    await store.put(MANIFEST, b"{}")
    scanner = BucketScanner(store, rlmm, key_prefix="tt/")
    with caplog.at_level(logging.WARNING, logger="gateway.metadata"):
        first = await scanner.scan()
        second = await scanner.scan()
    assert first.scope_warning is not None and "did you mean the key prefix 't/'" in (
        first.scope_warning
    )
    assert second.scope_warning is None and second.manifests == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [f"bucket scan: {first.scope_warning}"]
    assert all(r.name.startswith("gateway.metadata") for r in warnings)


async def test_a_missing_slash_skips_nothing_key_by_key(
    tmp_path: Path, rlmm: RemoteLogMetadataManager
) -> None:
    store = FilesystemStore(tmp_path)
    for n in range(3):
        await store.put(MANIFEST.replace("/0/", f"/{n}/"), b"{}")
    report = await BucketScanner(store, rlmm, key_prefix="t").scan()
    assert (report.manifests, report.misprefixed, report.skipped) == (0, 3, {})
    assert report.scope_warning is not None and "3 manifests are under 't/'" in (
        report.scope_warning
    )


def test_a_listing_says_which_segment_displaced_which(rlmm: RemoteLogMetadataManager) -> None:
    for n, start, end, event_time in [(1, 10, 90, 1_000), (2, 91, 100, 1_000), (3, 5, 100, 2_000)]:
        rlmm.apply(segment(n, start, end, {0: start}, event_time=event_time))
        rlmm.apply(update(n, SegmentState.COPY_SEGMENT_FINISHED))
    rlmm.apply(segment(4, 101, 150))  # started, never finished: not displaced
    listed = {s.meta.segment_id: (s.displaced, s.displaced_by) for s in list_segments(rlmm, TP)}
    assert listed == {
        seg_id(1): (True, seg_id(3)),
        seg_id(2): (True, seg_id(3)),
        seg_id(3): (False, None),
        seg_id(4): (False, None),
    }
