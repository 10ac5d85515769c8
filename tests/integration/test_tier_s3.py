"""End to end on a real moto S3 server: `tiered-gateway tier` uploads, the reader reads back."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from Crypto.PublicKey import RSA

from gateway.deadline import Deadline
from gateway.kafka.demo import write_demo_segment
from gateway.remote.keyring import KeyRing
from gateway.remote.keys import Suffix, parse_object_key
from gateway.remote.manifest import IndexType, parse_manifest
from gateway.remote.reader import RemoteSegment, SegmentReader
from gateway.storage.factory import open_store
from gateway.storage.retry import Retrier


async def test_tier_command_to_s3_and_read_back(
    tmp_path: Path, moto_endpoint: str, s3_bucket: str
) -> None:
    files = write_demo_segment(tmp_path / "partition")
    pem = tmp_path / "k1.pem"
    pem.write_bytes(RSA.generate(2048).export_key(format="PEM", pkcs=8))
    exe = Path(sys.executable).with_name("tiered-gateway")
    done = subprocess.run(
        [
            exe, "tier", str(tmp_path / "partition"), "--store", f"s3://{s3_bucket}",
            "--s3-endpoint-url", moto_endpoint, "--s3-region", "us-east-1",
            "--key-prefix", "tiered/", "--topic", "orders.v1-eu",
            "--topic-id", "6b1c4bd6-6d1f-4a4e-9f0e-6a2f1f0f6b1c", "--partition", "7",
            "--chunk-size", "1024", "--compression", "--encrypt-with", "k1", "--include-active",
            "--key-pair", f"k1={pem}",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    report = json.loads(line)
    assert report["compression"] is True and report["chunks"] == 18
    assert "BEGIN" not in done.stdout + done.stderr  # no key material, ever

    store = await open_store(f"s3://{s3_bucket}", endpoint_url=moto_endpoint, region="us-east-1")
    try:
        keys = sorted([i.key async for i in store.list("tiered/")])
        assert [k.rsplit(".", 1)[1] for k in keys] == ["indexes", "log", "rsm-manifest"]
        manifest_key = parse_object_key(keys[2], prefix="tiered/")
        assert (manifest_key.topic, manifest_key.partition) == ("orders.v1-eu", 7)
        manifest = parse_manifest(await store.get(keys[2]), keys[2])
        assert manifest.encryption is not None and manifest.encryption.key_id == "k1"
        remote = RemoteSegment.open(manifest_key, manifest, KeyRing.from_specs([f"k1={pem}"]))
        with ThreadPoolExecutor(2) as pool:
            reader = SegmentReader(store, Retrier(), pool)
            log = files.log.read_bytes()
            assert await reader.read_range(remote, 0, remote.size, Deadline.after(30)) == log
            assert await reader.read_range(remote, 5000, 9000, Deadline.after(30)) == log[5000:9000]
            pieces = await reader.read_indexes(remote, Deadline.after(30))
        assert pieces[IndexType.OFFSET] == files.offset_index.read_bytes()
        assert files.txn_index is not None
        assert pieces[IndexType.TRANSACTION] == files.txn_index.read_bytes()
        assert remote.key.with_suffix(Suffix.MANIFEST).key == keys[2]
    finally:
        await store.close()


async def test_tier_again_skips_segments_already_in_the_bucket(
    tmp_path: Path, moto_endpoint: str, s3_bucket: str
) -> None:
    write_demo_segment(tmp_path / "partition")
    exe = Path(sys.executable).with_name("tiered-gateway")
    argv: list[str | Path] = [
        exe, "tier", str(tmp_path / "partition"), "--store", f"s3://{s3_bucket}",
        "--s3-endpoint-url", moto_endpoint, "--s3-region", "us-east-1",
        "--key-prefix", "tiered/", "--topic", "orders", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ",
        "--partition", "0", "--include-active",
    ]  # fmt: skip

    def tier(*extra: str) -> dict[str, object]:
        done = subprocess.run([*argv, *extra], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()
        result: dict[str, object] = json.loads(line)
        return result

    async def keys() -> list[str]:
        store = await open_store(
            f"s3://{s3_bucket}", endpoint_url=moto_endpoint, region="us-east-1"
        )
        try:
            return [i.key async for i in store.list("tiered/")]
        finally:
            await store.close()

    first = tier()
    uploaded = await keys()
    assert "skipped" not in first and len(uploaded) == 3
    again = tier()
    assert again["skipped"] is True and again["key"] in uploaded
    assert await keys() == uploaded
    forced = tier("--force")
    assert "skipped" not in forced and len(await keys()) == 6
