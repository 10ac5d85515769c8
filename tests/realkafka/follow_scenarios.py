"""The named checks of issue 29 (``live-metadata``, ``retention``, ``delete-records``,
``topic-deleted``, ``upload-in-flight``) on one real broker that tiers, with ``serve`` following
its ``__remote_log_metadata`` (:mod:`tests.realkafka.follow_checks` has the reads)."""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

import httpx

from gateway.kafka.uuids import encode_uuid
from tests.realkafka.follow_checks import (
    DAY_MS,
    SERVED_WITHIN_S,
    broker_earliest,
    broker_earliest_at,
    broker_rows,
    catalog_rows,
    earliest,
    exported_offsets,
    gateway,
    gateway_rows,
    info,
    plugin_dir,
    produce_at,
    wait_for,
)
from tests.realkafka.mirror import Mirror
from tests.realkafka.report import Report
from tests.realkafka.surfaces import RECORDS
from tests.realkafka.tiering import (
    COPY_FINISHED,
    COPY_STARTED,
    DELETE_FINISHED,
    HOLD_FILE,
    TieringBroker,
    summarize,
)

TOPICS = ("live", "retain", "trim", "gone", "held")


class Scenario:
    def __init__(
        self, broker: TieringBroker, bucket: Path, work: Path, report: Report, mode: str
    ) -> None:
        self.broker, self.bucket, self.work, self.report = broker, bucket, work, report
        self.mode = mode
        self.written: dict[str, list[list[int]]] = {}

    def name(self, check: str, what: str) -> str:
        return f"{check} ({self.mode}): {what}"

    # --- the metadata topic, as the broker wrote it --------------------------------------

    def ends(self, topic: str) -> dict[uuid.UUID, tuple[int, int, int]]:
        """segment id -> (start, end, last state) of ``topic``."""
        out: dict[uuid.UUID, tuple[int, int, int]] = {}
        for record in self.broker.metadata_records():
            e = summarize(record.value)
            if e.topic != topic or e.segment_id is None:
                continue
            start, end, _ = out.get(e.segment_id, (e.start_offset, e.end_offset, 0))
            out[e.segment_id] = (start or 0, end or 0, e.state)
        return out

    def remote_end(self, topic: str) -> int:
        """One past the last offset of ``topic``'s finished segments."""
        done = [end for _, end, st in self.ends(topic).values() if st == COPY_FINISHED]
        return max(done, default=-1) + 1

    def manifests(self) -> int:
        return sum(1 for _ in self.bucket.rglob("*.rsm-manifest"))

    def settle(self, topic: str) -> None:
        """Until every finished segment of ``topic`` has its manifest in the bucket (at once
        with the plugin, which writes its objects before the broker writes FINISHED; the
        mirror of LocalTieredStorage may trail the record by a pass)."""
        names = {p.name for p in self.bucket.rglob("*.rsm-manifest")}

        def there() -> bool:
            names.update(p.name for p in self.bucket.rglob("*.rsm-manifest"))
            return all(
                f"{start:020d}-{encode_uuid(sid)}.rsm-manifest" in names
                for sid, (start, _, st) in self.ends(topic).items()
                if st == COPY_FINISHED
            )

        wait_for(f"{topic}: every finished segment in the bucket", there)

    def finished_count(self, topic: str) -> int:
        return sum(st == COPY_FINISHED for _, _, st in self.ends(topic).values())

    def produce_and_tier(self, topic: str, segments: int) -> list[list[int]]:
        """``segments`` segments and the trailer that rolls the last one, all tiered (the
        trailer's segment too: local retention rolls it) and in the bucket: the topic is quiet
        after, so a walk sees no upload finish under it."""
        before = self.finished_count(topic)
        written = self.broker.produce_segments(topic, segments)
        wait_for(
            f"{topic}: {segments + 1} uploads",
            lambda: self.finished_count(topic) >= before + segments + 1,
        )
        self.settle(topic)
        return written

    # --- the run -------------------------------------------------------------------------

    def setup(self) -> None:
        b = self.broker
        for topic in TOPICS:
            b.create_tiered_topic(topic)
        now = int(time.time() * 1000)
        produce_at(b, "retain", now - 2 * DAY_MS)  # one segment that retention will delete
        for topic in TOPICS:
            self.written[topic] = self.produce_and_tier(topic, 3 if topic == "trim" else 2)

    def run_all(self) -> None:
        r = self.report
        r.guarded(self.name("setup", "topics written and tiered"), self.setup)
        if len(self.written) < len(TOPICS):
            return
        state = self.work / "state"
        with gateway(self.bucket, self.broker, state, self.work / "serve.log") as (c, kafka):
            r.guarded(self.name("live-metadata", "the catalog"), self.live_metadata, c)
            r.guarded(self.name("retention", "earliest moves"), self.retention, c)
            r.guarded(self.name("delete-records", "log start"), self.delete_records, c, kafka)
            r.guarded(self.name("topic-deleted", "gone"), self.topic_deleted, c)
            if self.mode == "local-tiered-storage":
                r.guarded(self.name("upload-in-flight", "held"), self.upload_in_flight, c)
        with gateway(self.bucket, self.broker, state, self.work / "serve-2.log") as (c, _):
            r.guarded(self.name("live-metadata", "a restart resumes"), self.resumed, c)
        with gateway(self.bucket, self.broker, self.work / "state-both",
                     self.work / "serve-both.log", source="both") as (c, _):  # fmt: skip
            r.guarded(self.name("live-metadata", "--metadata-source both"), self.both, c)
        if self.mode == "local-tiered-storage":  # issue 29's stretch: Kafka's own files
            for source in ("bucket", "topic"):
                name = self.name("local-tiered-storage", f"serve --layout, catalog from {source}")
                r.guarded(name, self.local_layout, source)

    # --- the checks ----------------------------------------------------------------------

    def same_records(self, check: str, client: httpx.Client, topic: str) -> None:
        """The gateway's records = the broker consumer's, up to the remote end the metadata
        topic announces (the broker also has its local tail, never tiered yet)."""
        self.settle(topic)
        end = self.remote_end(topic)
        self.report.verdict(
            self.name(check, f"{topic}: the end = the last finished segment's, {end}"),
            [] if info(client, topic).get("remote_log_end_offset") == end else ["differs"],
        )
        # The broker may tier more while the gateway is read (the ``held`` topic goes on
        # uploading after its restart): both sides are compared below ``end``, and what the
        # gateway served past it must lie below the end it announces once the read is over.
        served = gateway_rows(client, topic)
        later = info(client, topic).get("remote_log_end_offset")
        beyond = [row["offset"] for row in served if row["offset"] >= end]
        self.report.verdict(
            self.name(check, f"{topic}: nothing served past the end announced after the read"),
            [] if isinstance(later, int) and all(o < later for o in beyond) else [f"{later}"],
        )
        self.report.compare(
            self.name(check, f"{topic}: every record the broker's consumer reads"),
            "http-json",
            f"follow/{topic}",
            [row for row in broker_rows(self.broker.bootstrap, topic) if row["offset"] < end],
            [row for row in served if row["offset"] < end],
        )

    def live_metadata(self, client: httpx.Client) -> None:
        r, b = self.report, self.broker
        store = ["--store", f"file://{self.bucket}"]
        scan = catalog_rows(["scan", *store], "live")
        followed = catalog_rows(["follow", "--metadata-bootstrap", b.bootstrap, *store], "live")
        r.compare(
            self.name("live-metadata", "catalog follow = catalog scan"),
            "catalog",
            "follow/live",
            scan,
            followed,
        )
        got = info(client, "live")
        bounds = [(got.get("remote_log_start_offset"), got.get("remote_log_end_offset"))]
        want = [(row["remote_log_start_offset"], row["remote_log_end_offset"]) for row in scan]
        r.compare(
            self.name("live-metadata", "serve's bounds = the scan's"),
            "catalog",
            "follow/live",
            want,
            bounds,
        )
        before, uploads = self.remote_end("live"), self.finished_count("live")
        b.produce_segments("live", 2)
        wait_for("new FINISHED records", lambda: self.remote_end("live") > before + 20)
        end = self.remote_end("live")
        took = wait_for(
            "served",
            lambda: info(client, "live").get("remote_log_end_offset", 0) >= end,
            SERVED_WITHIN_S,
        )
        r.verdict(
            self.name(
                "live-metadata",
                f"new segments served {took:.1f} s after their FINISHED records were read back",
            ),
            [],
        )
        wait_for("the trailer's upload", lambda: self.finished_count("live") >= uploads + 3)
        self.settle("live")
        self.same_records("live-metadata", client, "live")
        scan = catalog_rows(["scan", *store], "live")
        followed = catalog_rows(["follow", "--metadata-bootstrap", b.bootstrap, *store], "live")
        r.compare(
            self.name("live-metadata", "after uploads while serving: follow = scan"),
            "catalog",
            "follow/live",
            scan,
            followed,
        )

    def retention(self, client: httpx.Client) -> None:
        b = self.broker
        b.set_retention_ms("retain", DAY_MS)
        wait_for(
            "the old segment deleted",
            lambda: any(
                start == 0 and st == DELETE_FINISHED
                for start, _, st in self.ends("retain").values()
            ),
        )
        want = broker_earliest(b, "retain")
        wait_for("earliest moved", lambda: earliest(client, "retain") == want)
        self.report.verdict(
            self.name("retention", f"earliest {want} = the broker's"),
            [] if want > 0 else [f"the broker's earliest is still {want}"],
        )
        below = client.get(RECORDS.format(topic="retain", partition=0), params={"offset": 0})
        self.report.verdict(
            self.name("retention", "a fetch below earliest is out of range"),
            [] if below.status_code == 416 else [f"{below.status_code} {below.text[:200]}"],
        )
        self.same_records("retention", client, "retain")

    def delete_records(self, client: httpx.Client, kafka: str) -> None:
        b, r = self.broker, self.report
        second = self.written["trim"][1]
        low = b.delete_records("trim", 0, second[len(second) // 2])
        wait_for(
            "the segment below deleted",
            lambda: any(st == DELETE_FINISHED for _, _, st in self.ends("trim").values()),
        )
        before = earliest(client, "trim")
        r.verdict(
            self.name(
                "delete-records",
                f"low watermark {low}; before a later upload the "
                f"bucket reveals only its segment's start, {before}",
            ),
            [] if before is not None and before <= low else [f"earliest {before}"],
        )
        self.produce_and_tier("trim", 1)
        wait_for("earliest at the log start", lambda: earliest(client, "trim") == low)
        end = self.remote_end("trim")
        want = [row for row in broker_rows(b.bootstrap, "trim") if row["offset"] < end]
        got = gateway_rows(client, "trim")
        r.verdict(
            self.name("delete-records", f"ListOffsets earliest = {low} = the broker's"),
            []
            if broker_earliest(b, "trim") == low == earliest(client, "trim")
            else ["earliest differs"],
        )
        r.verdict(
            self.name("delete-records", "the HTTP walk's first record = the broker's"),
            []
            if got[:1] == want[:1] and want[0]["offset"] == low
            else [f"{got[:1]} want {want[:1]}"],
        )
        r.compare(
            self.name("delete-records", "HTTP records"), "http-json", "follow/trim", want, got
        )
        low_there = broker_earliest_at(kafka, "trim")
        r.verdict(
            self.name("delete-records", f"the Kafka listener's earliest {low_there} = {low}"),
            [] if low_there == low else ["differs"],
        )
        offsets = [row["offset"] for row in want]
        for how, extra in (
            ("a bucket scan", ()),
            ("the topic", ("--metadata-bootstrap", b.bootstrap)),
        ):
            out = self.work / f"export-{len(extra)}"
            r.compare(
                self.name("delete-records", f"export (the Spark source) planned from {how}"),
                "export",
                "follow/trim",
                [{"offset": o} for o in offsets],
                [{"offset": o} for o in exported_offsets(self.bucket, "trim", out, *extra)],
            )
        listener = broker_rows(kafka, "trim")  # librdkafka from OFFSET_BEGINNING, as on the broker
        r.compare(
            self.name("delete-records", "the Kafka listener (librdkafka)"),
            "listener",
            "follow/trim",
            want,
            listener,
        )

    def topic_deleted(self, client: httpx.Client) -> None:
        b = self.broker
        b.delete_topic("gone")
        wait_for(
            "every segment deleted",
            lambda: all(st == DELETE_FINISHED for _, _, st in self.ends("gone").values()),
        )

        def listed() -> bool:
            return "gone" in client.get("/v1/topics").text

        wait_for("no longer listed", lambda: not listed(), SERVED_WITHIN_S)
        read = client.get(RECORDS.format(topic="gone", partition=0), params={"offset": 0})
        self.report.verdict(
            self.name("topic-deleted", "not listed; a read is 404"),
            [] if read.status_code == 404 else [f"{read.status_code} {read.text[:200]}"],
        )

    def upload_in_flight(self, client: httpx.Client) -> None:
        b, r = self.broker, self.report
        before = set(self.ends("held"))
        end = self.remote_end("held")
        (b.remote_dir / HOLD_FILE).touch()
        b.produce_segments("held", 1)

        def held() -> list[uuid.UUID]:
            return [
                s
                for s, (_, _, st) in self.ends("held").items()
                if s not in before and st == COPY_STARTED
            ]

        wait_for("a copy started", lambda: bool(held()))
        sid = held()[0]
        wait_for(
            "its objects in the bucket",
            lambda: any(encode_uuid(sid) in p.name for p in self.bucket.rglob("*.rsm-manifest")),
        )
        b.kill()
        got = info(client, "held").get("remote_log_end_offset")
        scan = catalog_rows(["scan", "--store", f"file://{self.bucket}"], "held")
        r.verdict(
            self.name(
                "upload-in-flight",
                f"end {got} (the bucket scan says {scan[0]['remote_log_end_offset']})",
            ),
            []
            if got == end < scan[0]["remote_log_end_offset"]
            else [f"served to {got}, want {end}"],
        )
        fetch = client.get(RECORDS.format(topic="held", partition=0), params={"offset": end})
        body = fetch.json() if fetch.status_code == 200 else {}
        r.verdict(
            self.name("upload-in-flight", "a fetch at its first offset: the log's end, empty"),
            []
            if body.get("records") == [] and body.get("end_of_remote_log")
            else [f"{fetch.status_code} {fetch.text[:200]}"],
        )
        b.release_uploads()
        b.restart()
        wait_for("uploaded again after the restart", lambda: self.remote_end("held") > end)
        new_end = self.remote_end("held")
        wait_for("served", lambda: info(client, "held").get("remote_log_end_offset", 0) >= new_end)
        self.same_records("upload-in-flight", client, "held")

    def both(self, client: httpx.Client) -> None:
        """The topic and bucket scans together: the same records, and the segment whose copy
        never finished (its objects in the bucket) still not registered by a scan."""
        for topic in ("live", "trim", "held"):
            self.same_records("live-metadata, both", client, topic)
        if self.mode != "local-tiered-storage":
            return  # a copy is held in flight with LocalTieredStorage only
        segments = client.get("/v1/topics/held/partitions/0/segments").json()["segments"]
        states = {s["segment_id"]: s["state"] for s in segments}
        started = [encode_uuid(sid) for sid, (_, _, st) in self.ends("held").items()
                   if st == COPY_STARTED]  # fmt: skip
        self.report.verdict(
            self.name("live-metadata", "both: a scan does not finish a copy the topic started"),
            []
            if started and all(states.get(s) == "COPY_SEGMENT_STARTED" for s in started)
            else [f"{started}: {[states.get(s) for s in started]}"],
        )

    def local_layout(self, source: str) -> None:
        """``serve --layout local-tiered-storage`` on the broker's own ``LocalTieredStorage``
        folder (no mirror): the same records as the broker's consumer, from the same start."""
        folder = self.broker.remote_dir
        state, log = self.work / f"state-lts-{source}", self.work / f"serve-lts-{source}.log"
        with gateway(folder, self.broker, state, log, source=source,
                     layout="local-tiered-storage") as (client, _):  # fmt: skip
            for topic in ("live", "trim", "held"):
                self.same_records(f"local-tiered-storage, {source}", client, topic)

    def resumed(self, client: httpx.Client) -> None:
        """The restarted gateway read only what came after its stored position."""
        total = len(self.broker.metadata_records())
        text = client.get("/metrics").text
        metric = "tiered_gateway_metadata_follow_records_total"
        line = next(x for x in text.splitlines() if x.startswith(metric))
        read = int(float(line.split()[-1]))
        self.report.verdict(
            self.name("live-metadata", f"restarted: read {read} of {total} records"),
            [] if read < total else [f"read {read} records again"],
        )
        self.same_records("live-metadata", client, "live")


def run(work: Path, report: Report) -> None:
    """Every named check on one broker: Kafka's ``LocalTieredStorage`` mirrored into the
    Aiven layout, or the Aiven plugin when ``TG_AIVEN_PLUGIN_DIR`` names it."""
    plugin = plugin_dir()
    mode = "aiven" if plugin else "local-tiered-storage"
    broker = TieringBroker(work / "broker", work / "remote", plugin_dir=plugin)
    bucket = work / "remote" if plugin else work / "bucket"
    try:
        broker.start()
        with contextlib.nullcontext() if plugin else Mirror(broker, bucket):
            Scenario(broker, bucket, work, report, mode).run_all()
    finally:
        broker.close()
