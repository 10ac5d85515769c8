"""The tiering writer's side of the RLMM: register an upload as the broker's copy task does.

``RemoteLogManager.copyLogSegment`` publishes COPY_SEGMENT_STARTED, copies through the remote
storage manager, then publishes COPY_SEGMENT_FINISHED. When the copy fails it deletes what it
may have written and publishes DELETE_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED, so no
half-written segment is ever readable (``remote-read-semantics.md`` §3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gateway.errors import GatewayError
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.manifests import metadata_from_manifest
from gateway.metadata.model import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate
from gateway.metadata.model import SegmentState as S
from gateway.remote.keys import Suffix
from gateway.remote.tiering import SegmentObjects, upload_segment
from gateway.storage.base import ObjectStore

log = logging.getLogger(__name__)


def _update(meta: RemoteLogSegmentMetadata, state: S) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        meta.segment_id, meta.event_timestamp_ms, None, state, meta.broker_id
    )


async def upload_registered(
    store: ObjectStore, objects: SegmentObjects, manager: RemoteLogMetadataManager
) -> RemoteLogSegmentMetadata:
    """Upload ``objects`` with the STARTED / FINISHED (or DELETE_*) events around it."""
    meta = metadata_from_manifest(objects.key, objects.manifest)
    await asyncio.to_thread(manager.apply, meta)
    try:
        await upload_segment(store, objects)
    except BaseException:
        await asyncio.to_thread(manager.apply, _update(meta, S.DELETE_SEGMENT_STARTED))
        for suffix in (Suffix.MANIFEST, Suffix.INDEXES, Suffix.LOG):  # best effort
            with contextlib.suppress(GatewayError, OSError):
                await store.delete(objects.key.with_suffix(suffix).key)
        await asyncio.to_thread(manager.apply, _update(meta, S.DELETE_SEGMENT_FINISHED))
        log.warning("upload of %s failed; segment deregistered", objects.key.key)
        raise
    await asyncio.to_thread(manager.apply, _update(meta, S.COPY_SEGMENT_FINISHED))
    return manager.segment(meta.segment_id) or meta
