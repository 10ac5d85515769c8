"""ListOffsets on every surface against Kafka's answers: ``offsetsForTimes`` for timestamps from
the data, the broker's Admin ListOffsets (earliest, latest in both isolation levels,
earliest-local, latest-tiered), and max-timestamp by DumpLogSegments' rule (checked against the
live broker's own answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.realkafka import dumps
from tests.realkafka.bucket import Bucket
from tests.realkafka.java import JavaTools
from tests.realkafka.report import Report, Row


def max_timestamp_rule(bucket: Bucket, report: Report) -> None:
    """The rule the tiered buckets' max_timestamp expectation follows (DumpLogSegments: the
    first record of the greatest timestamp, control batches included), against the live
    broker's own answer, which it gives from local segments."""
    for topic, partitions in bucket.topics.items():
        admin = bucket.offsets(topic)["admin"]
        want = [{"partition": p, **admin[str(p)]["max_timestamp"]} for p in range(partitions)]
        got = [{"partition": p, **dumps.max_timestamp(bucket, topic, p)} for p in range(partitions)]
        report.compare(
            f"{bucket.name}/{topic} max_timestamp from DumpLogSegments = the broker's ListOffsets",
            "max-timestamp-rule",
            f"{bucket.name}/{topic}",
            want,
            got,
        )


def expected_times(bucket: Bucket, topic: str, times: str = "times") -> list[Row]:
    """offsetsForTimes as the broker answered it (``times``: a read_uncommitted consumer's;
    ``times_committed``: a read_committed one's), but for the remote tier alone: an answer in a
    segment never tiered is none there."""
    rows = []
    for p, part in sorted(bucket.offsets(topic)["partitions"].items(), key=lambda kv: int(kv[0])):
        end = bucket.remote_end(topic, int(p))
        for ts, hit in sorted(part[times].items(), key=lambda kv: int(kv[0])):
            keep = hit is not None and hit["offset"] < end
            rows.append({"partition": int(p), "target": int(ts), **_hit(hit if keep else None)})
    return rows


ADMIN_SPECS = (
    "earliest",
    "latest_uncommitted",
    "latest_committed",
    "earliest_local",
    "latest_tiered",
    "max_timestamp",
)


def expected_admin(bucket: Bucket, topic: str, partitions: int) -> list[Row]:
    """The broker's Admin ListOffsets answers, taken once the whole log was tiered (its log end
    is the remote log end: checked), but max_timestamp, which a 4.1 broker answers from its
    local segments only (-1 here): that one is DumpLogSegments' (the first record of the
    greatest timestamp, control batches included, and its batch's leader epoch)."""
    admin = bucket.offsets(topic)["admin"]
    specs = ADMIN_SPECS[:3] + ADMIN_SPECS[5:] if bucket.live else ADMIN_SPECS  # no tiering there
    rows = []
    for p in range(partitions):
        answers = admin[str(p)]
        if answers["latest_uncommitted"]["offset"] != bucket.remote_end(topic, p):
            raise AssertionError(f"{topic}-{p}: the broker's log end is not the remote log end")
        for spec in specs:
            hit = (
                answers[spec] if spec != "max_timestamp" else dumps.max_timestamp(bucket, topic, p)
            )
            rows.append(
                {
                    "partition": p,
                    "spec": spec,
                    "offset": hit["offset"],
                    "timestamp": hit["timestamp"],
                    "leaderEpoch": hit["leaderEpoch"],
                }
            )
    return rows


_HTTP_SPECS = {
    "earliest": {"timestamp": "earliest"},
    "latest_uncommitted": {"timestamp": "latest"},
    "latest_committed": {"timestamp": "latest", "isolation_level": "read_committed"},
    "max_timestamp": {"timestamp": "max_timestamp"},
}


class OffsetsAnswerError(AssertionError):
    """ListOffsets over HTTP did not answer 200 with an offset."""


def http_offset(client: httpx.Client, topic: str, partition: int, params: dict[str, Any]) -> Row:
    """One ListOffsets over HTTP as offset, timestamp, leaderEpoch; a 200 with offset -1 (no
    match) is all ``None``; any other answer raises."""
    r = client.get(f"/v1/topics/{topic}/partitions/{partition}/offsets", params=params)
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    if r.status_code != 200 or not isinstance(body.get("offset"), int):
        raise OffsetsAnswerError(f"{topic}-{partition} {params}: {r.status_code} {r.text[:300]}")
    if body["offset"] == -1:
        return {"offset": None, "timestamp": None, "leaderEpoch": None}
    return {
        "offset": body["offset"],
        "timestamp": body["timestamp"],
        "leaderEpoch": body.get("leader_epoch"),
    }


def offsets_checks(
    bucket: Bucket, client: httpx.Client, topic: str, partitions: int, report: Report
) -> None:
    for times, isolation in (("times", "read_uncommitted"), ("times_committed", "read_committed")):
        want = expected_times(bucket, topic, times)
        name = f"{bucket.name}/{topic} http ListOffsets by timestamp {isolation} = offsetsForTimes"
        got = report.guarded(
            name,
            lambda w=want, i=isolation: [
                {
                    "partition": r["partition"],
                    "target": r["target"],
                    **http_offset(
                        client,
                        topic,
                        r["partition"],
                        {"timestamp": r["target"], "isolation_level": i},
                    ),
                }
                for r in w
            ],
        )
        if got is not None:
            report.compare(name, "http-offsets", f"{bucket.name}/{topic}", want, got)
    want = [r for r in expected_admin(bucket, topic, partitions) if r["spec"] in _HTTP_SPECS]
    name = (
        f"{bucket.name}/{topic} http ListOffsets earliest/latest/max_timestamp"
        " = the broker's, DumpLogSegments'"
    )
    got = report.guarded(
        name,
        lambda: [
            {
                "partition": r["partition"],
                "spec": r["spec"],
                **http_offset(client, topic, r["partition"], _HTTP_SPECS[r["spec"]]),
            }
            for r in want
        ],
    )
    if got is not None:
        report.compare(name, "http-offsets", f"{bucket.name}/{topic}", want, got)


def listener_offsets_checks(
    bucket: Bucket,
    java: JavaTools,
    bootstrap: str,
    topic: str,
    partitions: int,
    report: Report,
    work: Path,
) -> None:
    """The listener under Kafka's Java clients: ``offsetsForTimes`` (both isolation levels),
    ``beginningOffsets``/``endOffsets``, and the Admin client's ListOffsets specs."""
    out = work / f"{bucket.name}-{topic}-offsets.json"
    name = f"{bucket.name}/{topic} listener offsetsForTimes and Admin ListOffsets: Java clients"
    want = expected_times(bucket, topic)
    stamps = sorted({str(r["target"]) for r in want}, key=int)
    if report.guarded(name, java.run, "offsets", bootstrap, topic, str(out), *stamps) is None:
        return
    answered = json.loads(out.read_text())
    for times in ("times", "times_committed"):
        want = expected_times(bucket, topic, times)
        got = [
            {
                "partition": r["partition"],
                "target": r["target"],
                **_hit(answered["partitions"][str(r["partition"])][times].get(str(r["target"]))),
            }
            for r in want
        ]
        report.compare(f"{name}: {times}", "listener-offsets", f"{bucket.name}/{topic}", want, got)
    bounds = ("beginning", "end_uncommitted", "end_committed")
    oracle = bucket.offsets(topic)["partitions"]
    want = [{"partition": p, **{b: oracle[str(p)][b] for b in bounds}} for p in range(partitions)]
    got = [
        {"partition": p, **{b: answered["partitions"][str(p)][b] for b in bounds}}
        for p in range(partitions)
    ]
    report.compare(
        f"{name}: beginningOffsets, endOffsets",
        "listener-offsets",
        f"{bucket.name}/{topic}",
        want,
        got,
    )
    want = expected_admin(bucket, topic, partitions)
    got = [
        {
            "partition": r["partition"],
            "spec": r["spec"],
            **{
                k: answered["admin"][str(r["partition"])][r["spec"]][k]
                for k in ("offset", "leaderEpoch")
            },
            "timestamp": answered["admin"][str(r["partition"])][r["spec"]]["timestamp"],
        }
        for r in want
    ]
    report.compare(f"{name}: Admin", "listener-offsets", f"{bucket.name}/{topic}", want, got)


def _hit(hit: dict[str, Any] | None) -> dict[str, Any]:
    if hit is None:
        return {"offset": None, "timestamp": None, "leaderEpoch": None}
    return {
        "offset": hit["offset"],
        "timestamp": hit["timestamp"],
        "leaderEpoch": hit["leaderEpoch"],
    }
