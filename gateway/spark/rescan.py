"""A streaming query's metadata, kept in step with the bucket from trigger to trigger.

A batch read scans the bucket once (:func:`gateway.spark.driver.build_plan`). A streaming
query asks at every trigger, so it keeps one RLMM and one
:class:`~gateway.metadata.scan.BucketScanner` for its lifetime: each trigger is one incremental
pass, one listing of the manifests and a GET only of those not seen before (segments deleted
by retention leave the RLMM when their manifests leave the listing). The scanner is async; it
runs on an event loop of this object's own, on the driver's planning process. With the
``catalog`` option the catalog is reopened at every trigger instead, to see what ``tier`` or
``catalog scan`` registered since.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gateway.errors import ConfigurationError, UnknownTopicOrPartitionError
from gateway.metadata.bucket import bucket_scanner, claims_of
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.open import open_manager
from gateway.metadata.scan import BucketScanner
from gateway.remote.keyring import KeyRing
from gateway.remote.reader import SegmentReader
from gateway.spark.read_options import ReadOptions
from gateway.spark.rlmm import Claims
from gateway.storage.base import ObjectStore
from gateway.storage.factory import open_store
from gateway.storage.retry import Retrier, RetryPolicy


class Rescan:
    """The RLMM of one streaming query; :meth:`refresh` brings it up to date."""

    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._store: ObjectStore | None = None
        self._scanner: BucketScanner | None = None
        self._rlmm: RemoteLogMetadataManager | None = None

    def refresh(self) -> tuple[RemoteLogMetadataManager, Claims]:
        """The metadata as the bucket (or the catalog) holds it now, and the manifests the
        last pass could not read. A store fault raises; the previous state stays."""
        if self._opts.catalog is not None:
            path = Path(self._opts.catalog)
            if not path.is_dir():
                raise ConfigurationError(f"option catalog={self._opts.catalog!r}: not a directory")
            if self._rlmm is not None:
                self._rlmm.close()
            self._rlmm = open_manager(path)
            return self._rlmm, {}
        first = self._scanner is None
        if self._scanner is None:
            try:
                scanner = self._open()
            except BaseException:
                self.close()
                raise
        else:
            scanner = self._scanner
        assert self._loop is not None and self._rlmm is not None
        report = self._loop.run_until_complete(scanner.scan())
        if first and not report.manifests:  # a wrong keyPrefix: say what lies around it
            raise UnknownTopicOrPartitionError(
                f"{self._opts.subscription.describe()}: {report.scope_warning}"
            )
        return self._rlmm, claims_of(scanner.unreadable_all())

    def _open(self) -> BucketScanner:
        opts = self._opts
        spec = opts.store
        keys = KeyRing.from_specs(opts.key_pairs)
        self._loop = asyncio.new_event_loop()
        self._rlmm = open_manager(None)
        self._store = self._loop.run_until_complete(
            open_store(
                spec.url, endpoint_url=spec.endpoint_url, region=spec.region,
                path_style=spec.path_style,
            )
        )  # fmt: skip
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="stream-scan")
        retrier = Retrier(RetryPolicy())
        reader = SegmentReader(self._store, retrier, self._pool)
        self._scanner = bucket_scanner(
            self._store, self._rlmm, reader, keys, key_prefix=opts.key_prefix, retrier=retrier
        )
        return self._scanner

    def close(self) -> None:
        """Release everything, each part even when closing another one failed."""
        loop, pool, store, rlmm = self._loop, self._pool, self._store, self._rlmm
        self._loop = self._pool = self._store = self._scanner = self._rlmm = None
        try:
            if store is not None and loop is not None:
                loop.run_until_complete(store.close())
        finally:
            try:
                if pool is not None:
                    pool.shutdown()
                if loop is not None:
                    loop.close()
            finally:
                if rlmm is not None:
                    rlmm.close()
