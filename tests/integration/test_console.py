"""The history console (``/ui``) in a real browser: Debian's Chromium driven by Playwright,
against a real ``serve`` on the demo bucket, on a bucket of hostile records, and on a gateway
with API keys and Kafka ACLs. Every answer is compared with what the records API serves for
the same request (or with the records written); every page is watched for dialogs, script
errors, Content-Security-Policy violations and requests to any other address."""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import orjson
import pytest
from kafka.partitioner.default import murmur2  # kafka-python's, not ours
from kafka.record import MemoryRecords
from playwright.sync_api import Browser, Locator, Page

from gateway.demo import DemoBucket
from tests.fixtures.browser import RECORD_ROWS, Watch, chromium
from tests.fixtures.schema_bucket import tier_records
from tests.fixtures.secured import write_security_files
from tests.integration.serve import start_serve, stop, wait_ready

RECORDS = "/v1/topics/{}/partitions/{}/records"
TEXT = {"key_format": "string", "value_format": "string", "header_format": "string"}
# What anyone who may produce can write: markup, script, attribute and URL breakers.
PAYLOADS = [
    "<script>alert('k')</script>",
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(2)>",
    "javascript:alert(3)",
    "</textarea></pre></details><script>alert(4)</script>",
    "{{ 7*7 }} {% raw %}${7*7}",
    '<a href="javascript:alert(5)">click</a>',
    "&lt;b&gt;entity&amp; <b>bold</b>",
    "\u202egnp.exe <iframe src=//evil.test>",
    "<style>body{display:none}</style><link rel=stylesheet href=//evil.test/x.css>",
]


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self, **headers: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def _serve(args: list[str], log: Path) -> Iterator[Served]:
    proc, url = start_serve(args, log)
    try:
        wait_ready(url, proc, log)
        yield Served(url, proc, log)
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def demo_gw(demo: DemoBucket, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # small stream pages: a search and a download read many pages, as on a large partition
    log = tmp_path_factory.mktemp("console") / "serve.log"
    args = [*demo.serve_args, "--rescan-interval-s", "0", "--stream-page-bytes", "4096"]
    yield from _serve(args, log)


def _hostile_records() -> list[tuple[bytes | None, bytes | None]]:
    out: list[tuple[bytes | None, bytes | None]] = []
    for n in range(60):
        payload = PAYLOADS[n % len(PAYLOADS)]
        out.append((f"{payload} #{n}".encode(), f"value {n}: {payload}".encode()))
    return out


def _hostile_headers(n: int) -> list[tuple[str, bytes | None]]:
    payload = PAYLOADS[(n + 3) % len(PAYLOADS)]
    return [(payload, f"{payload} h{n}".encode())]


@pytest.fixture(scope="module")
def hostile_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("hostile")
    store = tier_records(work, "hostile", _hostile_records(), headers=_hostile_headers)
    yield from _serve(["--store", store, "--rescan-interval-s", "0"], work / "serve.log")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[tuple[Page, Watch]]:
    """A page in a fresh context, watched; the watch must be clean when the test ends."""
    context = browser.new_context(accept_downloads=True)
    tab = context.new_page()
    watch = Watch("")  # the test names its gateway (:func:`watched`)
    watch.attach(tab)
    try:
        yield tab, watch
    finally:
        context.close()
    assert watch.origin, "the test did not name its gateway"
    watch.clean()


def follow(tab: Page, target: Locator) -> None:
    """Click ``target`` and wait for the navigation it starts to load: a page read after it is
    the new one, never the one it left (a bare click returns before the navigation)."""
    with tab.expect_navigation():
        target.click()


def watched(page: tuple[Page, Watch], gw: Served) -> Page:
    """The page, its watch told which gateway is the only address it may ask."""
    tab, watch = page
    watch.origin = gw.url
    return tab


# --- reading from the API: the reference ------------------------------------------------


def api_records(gw: Served, topic: str, partition: int, isolation: str) -> list[dict[str, Any]]:
    with gw.client(accept="application/x-ndjson") as c:
        params = {"offset": 0, "isolation_level": isolation, "decode_errors": "raw", **TEXT}
        info = c.get(f"/v1/topics/{topic}/partitions/{partition}").json()
        params["offset"] = info["remote_log_start_offset"]
        lines = c.get(RECORDS.format(topic, partition), params=params).content.splitlines()
    docs = [orjson.loads(line) for line in lines]
    assert "next_offset" in docs[-1] and docs[-1]["end_of_remote_log"], docs[-1]
    return docs[:-1]


def shown_rows(tab: Page) -> list[dict[str, Any]]:
    """Each record row as the page shows it: offset, and the whole key and value text."""
    return tab.evaluate(RECORD_ROWS)


# --- seeking and paging -------------------------------------------------------------------


def test_an_offset_seek_shows_exactly_the_records_from_that_offset(
    demo_gw: Served, page: tuple[Page, Watch]
) -> None:
    tab = watched(page, demo_gw)
    expected = [
        r for r in api_records(demo_gw, "orders", 0, "read_uncommitted") if r["offset"] >= 17
    ]
    tab.goto(f"{demo_gw.url}/ui/topics/orders/0?count=1")
    tab.fill("form.seek input[name=offset]", "17")
    follow(tab, tab.locator("form.seek button", has_text="Go").first)
    tab.wait_for_url("**offset=17**")
    rows = shown_rows(tab)
    assert rows == [
        {"offset": r["offset"], "key": r["key"], "value": r["value"]} for r in expected[:1]
    ]
    tab.goto(f"{demo_gw.url}/ui/topics/orders/0?offset=17&count=25")
    rows = shown_rows(tab)
    assert rows == [
        {"offset": r["offset"], "key": r["key"], "value": r["value"]} for r in expected[:25]
    ]


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "America/Los_Angeles"])
def test_a_time_seek_lands_where_list_offsets_does(
    demo_gw: Served, page: tuple[Page, Watch], zone: str
) -> None:
    tab = watched(page, demo_gw)
    records = api_records(demo_gw, "orders", 1, "read_uncommitted")
    for record in records[:: max(1, len(records) // 4)]:
        second = record["timestamp"] // 1000 * 1000  # the form takes whole seconds
        local = dt.datetime.fromtimestamp(second / 1000, ZoneInfo(zone))
        with demo_gw.client() as c:
            want = c.get(
                "/v1/topics/orders/partitions/1/offsets", params={"timestamp": second}
            ).json()["offset"]
        tab.goto(f"{demo_gw.url}/ui/topics/orders/1")
        form = tab.locator("form.seek", has_text="Seek by time")
        form.locator("input[name=time]").fill(local.strftime("%Y-%m-%dT%H:%M:%S"))
        form.locator("input[name=tz]").fill(zone)
        follow(tab, form.locator("button", has_text="Go to time"))
        tab.wait_for_url(f"**offset={want}**")
        assert shown_rows(tab)[0]["offset"] == want
        # UTC is always shown, the zone beside it
        first = tab.locator("tr.record td.time").first.inner_text()
        assert "UTC" in first
        if zone != "UTC":
            assert local.strftime("%Z") in first or local.strftime("%z") in first


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_paging_forward_and_back_covers_every_record_once(
    demo_gw: Served, page: tuple[Page, Watch], isolation: str
) -> None:
    tab = watched(page, demo_gw)
    expected = [r["offset"] for r in api_records(demo_gw, "payments", 0, isolation)]
    assert len(expected) > 100  # transactions, aborted ones and control batches among them
    tab.goto(f"{demo_gw.url}/ui/topics/payments/0?count=9&isolation={isolation}&seek=earliest")
    forward: list[int] = []
    while True:
        forward += [r["offset"] for r in shown_rows(tab)]
        following = tab.locator("a[rel=next]")
        if following.count() == 0:
            break
        follow(tab, following)
    assert forward == expected
    tab.goto(f"{demo_gw.url}/ui/topics/payments/0?count=9&isolation={isolation}&seek=latest")
    pages: list[list[int]] = []
    while True:
        pages.append([r["offset"] for r in shown_rows(tab)])
        back = tab.locator("a[rel=prev]")
        if back.count() == 0:
            break
        follow(tab, back)
    backward = [o for p in reversed(pages) for o in p]
    # the first page back to the start may overlap the one after it only when it is short
    assert sorted(set(backward)) == expected
    assert all(len(p) == 9 for p in pages[:-1])
    assert backward == expected or pages[-1][0] == expected[0]


def test_a_page_url_shows_the_same_records_when_pasted(
    demo_gw: Served, page: tuple[Page, Watch]
) -> None:
    tab = watched(page, demo_gw)
    tab.goto(f"{demo_gw.url}/ui/topics/payments/0?seek=latest&count=5&tz=Europe/Paris")
    first = shown_rows(tab)
    link = tab.locator(".permalink a").get_attribute("href")
    assert link is not None and "seek" not in link and "offset=" in link
    tab.goto(demo_gw.url + link)
    assert shown_rows(tab) == first


CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@pytest.mark.parametrize(
    ("topic", "partition", "offsets"),
    [
        ("payments", 0, [0, 7, 40, 200]),  # transactional producers, encrypted chunks
        ("clicks.v2-raw", 1, [0, 33, 90]),  # every codec in turn
        ("inventory", 0, [0, 150, 400]),  # leader epochs 0, 2, 5, 8; a displaced upload
        ("orders", 0, [5, 300]),  # a LogAppendTime batch among CreateTime ones
    ],
)
def test_a_records_provenance_is_what_kafka_python_reads_of_its_batch(
    demo_gw: Served, page: tuple[Page, Watch], topic: str, partition: int, offsets: list[int]
) -> None:
    tab = watched(page, demo_gw)
    checked = 0
    with demo_gw.client() as c:
        segments = c.get(f"/v1/topics/{topic}/partitions/{partition}/segments").json()["segments"]
        for offset in offsets:
            raw = c.get(
                RECORDS.format(topic, partition),
                params={"offset": offset, "max_bytes": 1},
                headers={"accept": "application/octet-stream"},
            ).content
            batches = MemoryRecords(raw)
            batch = batches.next_batch()
            while batch is not None and not batch.base_offset <= offset <= batch.last_offset:
                batch = batches.next_batch()
            if batch is None:  # past this partition's end: no record there
                continue
            assert batch.validate_crc()
            segment = next(
                s for s in segments
                if not s["displaced"] and s["start_offset"] <= offset <= s["end_offset"]
            )  # fmt: skip
            tab.goto(f"{demo_gw.url}/ui/topics/{topic}/{partition}/records/{offset}")
            shown = tab.eval_on_selector_all(
                "[data-field]",
                "es => Object.fromEntries(es.map(e => [e.dataset.field, e.textContent]))",
            )
            assert shown == {
                "segment_id": segment["segment_id"],
                "base_offset": str(batch.base_offset),
                "last_offset": str(batch.last_offset),
                "records": str(batch.records_count),
                "size": str(batch.size_in_bytes),
                "producer_id": str(batch.producer_id),
                "producer_epoch": str(batch.producer_epoch),
                "base_sequence": str(batch.base_sequence),
                "transactional": "transactional" if batch.is_transactional else "not transactional",
                "codec": CODECS[batch.compression_type],
                "timestamp_type": "LogAppendTime" if batch.timestamp_type else "CreateTime",
                "leader_epoch": str(batch.leader_epoch),
                "crc": f"{batch.crc:08x}",
            }
            checked += 1
    assert checked >= 2


# --- search, key lookup, download ---------------------------------------------------------


def _run_search(tab: Page, start_url: str) -> tuple[list[int], int]:
    """Start the search planned at ``start_url`` and follow its go-on links to the end: the
    offsets found, and how many times it stopped at its budget."""
    tab.goto(start_url)
    follow(tab, tab.locator("button", has_text="Start the search"))
    found: list[int] = []
    stops = 0
    while True:
        tab.wait_for_selector("p.stopped", state="attached")
        found += [
            int(o)
            for o in tab.eval_on_selector_all("article.match", "a => a.map(e => e.dataset.offset)")
        ]
        stopped = tab.locator("p.stopped").get_attribute("data-stopped")
        if stopped in ("end", "until"):
            return found, stops
        assert stopped == "budget", stopped
        stops += 1
        follow(tab, tab.locator("a.resume"))


def test_a_search_plans_stops_at_its_budget_resumes_and_finds_what_brute_force_finds(
    hostile_gw: Served, page: tuple[Page, Watch]
) -> None:
    tab = watched(page, hostile_gw)
    records = _hostile_records()
    with hostile_gw.client() as c:
        segments = c.get("/v1/topics/hostile/partitions/0/segments").json()["segments"]
    plan_url = f"{hostile_gw.url}/ui/topics/hostile/0/search?value=alert&budget=700"
    tab.goto(plan_url)
    plan = tab.locator("p.plan")
    assert int(plan.get_attribute("data-segments") or -1) == len(segments)
    assert int(plan.get_attribute("data-bytes") or -1) == sum(s["size"] for s in segments)
    found, stops = _run_search(tab, plan_url)
    assert found == [n for n, (_, v) in enumerate(records) if v and b"alert" in v]
    assert stops >= 3
    found, _ = _run_search(tab, f"{hostile_gw.url}/ui/topics/hostile/0/search?header_value=h4")
    assert found == [
        n for n in range(len(records)) if any(v and b"h4" in v for _, v in _hostile_headers(n))
    ]


def test_a_search_over_the_demo_finds_what_the_api_brute_force_finds(
    demo_gw: Served, page: tuple[Page, Watch]
) -> None:
    tab = watched(page, demo_gw)
    records = api_records(demo_gw, "orders", 0, "read_uncommitted")
    found, stops = _run_search(
        tab, f"{demo_gw.url}/ui/topics/orders/0/search?value=customer-07&budget=20000"
    )
    assert found == [r["offset"] for r in records if r["value"] and "customer-07" in r["value"]]
    assert stops >= 2
    found, _ = _run_search(
        tab, f"{demo_gw.url}/ui/topics/orders/0/search?json_path=items.0.qty&json_value=5"
    )
    want = [
        r["offset"]
        for r in records
        if r["value"] and orjson.loads(r["value"]).get("items", [{}])[0].get("qty") == 5
    ]
    assert found == want and want


def test_the_key_lookup_searches_the_partition_kafka_would_pick(
    demo_gw: Served, page: tuple[Page, Watch]
) -> None:
    tab = watched(page, demo_gw)
    key = "account-042"
    partition = (murmur2(key.encode()) & 0x7FFFFFFF) % 2
    tab.goto(f"{demo_gw.url}/ui/topics/payments")
    tab.fill("input[name=key_equals]", key)
    follow(tab, tab.locator("button", has_text="Search its partition"))
    tab.wait_for_url(f"**/payments/{partition}/search**")
    tab.wait_for_selector("p.stopped", state="attached")
    found = [
        int(o)
        for o in tab.eval_on_selector_all("article.match", "a => a.map(e => e.dataset.offset)")
    ]
    want = [
        r["offset"]
        for r in api_records(demo_gw, "payments", partition, "read_uncommitted")
        if r["key"] == key
    ]
    assert found == want


def test_a_download_and_its_digest_equal_what_the_api_serves(
    demo_gw: Served, page: tuple[Page, Watch], tmp_path: Path
) -> None:
    tab = watched(page, demo_gw)
    tab.goto(f"{demo_gw.url}/ui/topics/payments/1?offset=0&isolation=read_committed")
    form = tab.locator("form.download")
    form.locator("input[name=from]").fill("13")
    form.locator("input[name=until]").fill("240")
    with tab.expect_download() as info:
        form.locator("button", has_text="Download NDJSON").click()
    saved = tmp_path / "download.ndjson"
    info.value.save_as(saved)
    body = saved.read_bytes()
    with demo_gw.client(accept="application/x-ndjson") as c:
        params = {"offset": 13, "isolation_level": "read_committed", "decode_errors": "raw", **TEXT}
        lines = c.get(RECORDS.format("payments", 1), params=params).content.splitlines(
            keepends=True
        )
    want = b"".join(line for line in lines[:-1] if orjson.loads(line)["offset"] < 240)
    assert body == want and body
    follow(tab, form.locator("button", has_text="Its SHA-256"))
    digest, name = tab.locator("body").inner_text().split()
    assert digest == hashlib.sha256(want).hexdigest()
    assert name == "payments-1-13-240.ndjson"


# --- hostile records and access -----------------------------------------------------------


DOM_CHECK = """() => {
    const all = Array.from(document.querySelectorAll('*'));
    const url = e => (e.getAttribute('href') || e.getAttribute('src') || '').trim();
    return {
        scripts: Array.from(document.scripts).map(s => s.src),
        injected: document.querySelectorAll(
            'img, iframe, svg:not(.histogram svg), style, object, embed, textarea').length,
        handlers: all.filter(e => Array.from(e.attributes).some(
            a => a.name.startsWith('on'))).length,
        js_urls: all.filter(e => url(e).toLowerCase().startsWith('javascript:')).length,
        links: Array.from(document.querySelectorAll('link')).map(l => l.href),
    };
}"""


def _dom_is_ours(tab: Page) -> None:
    """No element a record could have injected: one script (ours), no image, frame, style or
    link but ours, no event-handler attribute, no javascript: URL."""
    found = tab.evaluate(DOM_CHECK)
    assert len(found["scripts"]) == 1 and found["scripts"][0].endswith("/ui/static/console.js")
    assert found["injected"] == 0 and found["handlers"] == 0 and found["js_urls"] == 0, found
    assert [link.rsplit("/", 1)[-1] for link in found["links"]] == ["console.css", "favicon.svg"]


def test_hostile_keys_values_and_headers_are_shown_as_text(
    hostile_gw: Served, page: tuple[Page, Watch]
) -> None:
    tab = watched(page, hostile_gw)
    records = _hostile_records()
    tab.goto(f"{hostile_gw.url}/ui/topics/hostile/0?offset=0&count=500")
    rows = shown_rows(tab)
    assert rows == [
        {"offset": n, "key": k.decode() if k else None, "value": v.decode() if v else None}
        for n, (k, v) in enumerate(records)
    ]
    headers = tab.eval_on_selector_all("td.headers .header", "hs => hs.map(h => h.textContent)")
    assert headers == [
        f"{name}: {value.decode()}"
        for n in range(len(records))
        for name, value in _hostile_headers(n)
        if value
    ]
    _dom_is_ours(tab)
    for n in (0, 4, 8):
        tab.goto(f"{hostile_gw.url}/ui/topics/hostile/0/records/{n}")
        assert tab.locator("dd pre.text").first.text_content() == records[n][0].decode()  # type: ignore[union-attr]
        _dom_is_ours(tab)
    found, _ = _run_search(tab, f"{hostile_gw.url}/ui/topics/hostile/0/search?key=script")
    assert found == [n for n, (k, _) in enumerate(records) if k and b"script" in k]
    _dom_is_ours(tab)
    tab.goto(f"{hostile_gw.url}/ui/topics/hostile/0/search?value=%3Cscript%3E&header=%22%3E%3Cimg")
    assert "<script>" in tab.locator("ul.terms").inner_text()
    _dom_is_ours(tab)


ACL = """\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
 \t(principal=User:reader, host=*, operation=READ, permissionType=ALLOW)
 \t(principal=User:looker, host=*, operation=DESCRIBE, permissionType=ALLOW)

"""


@pytest.fixture(scope="module")
def secured_gw(
    demo: DemoBucket, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, dict[str, str]]]:
    work = tmp_path_factory.mktemp("console-acl")
    files = write_security_files(work, ACL, None, users=("reader", "looker", "nobody"))
    args = [*demo.serve_args, "--rescan-interval-s", "0", *files.serve_args(),
            "--no-console-downloads"]  # fmt: skip
    for served in _serve(args, work / "serve.log"):
        yield served, files.api_keys


def _sign_in(tab: Page, url: str, secret: str) -> None:
    tab.goto(f"{url}/ui/")
    tab.wait_for_url("**/ui/login**")
    tab.fill("input[name=secret]", secret)
    follow(tab, tab.locator("button", has_text="Sign in"))
    tab.wait_for_url("**/ui/")


def test_a_principal_without_describe_never_sees_the_topic_and_without_read_no_record(
    secured_gw: tuple[Served, dict[str, str]], page: tuple[Page, Watch]
) -> None:
    gw, keys = secured_gw
    tab, watch = page
    watch.origin = gw.url
    tab.goto(f"{gw.url}/ui/topics/orders/0?offset=0")
    tab.wait_for_url("**/ui/login?next=%2Fui%2Ftopics%2Forders%2F0")
    tab.fill("input[name=secret]", "tg_not-a-key")
    follow(tab, tab.locator("button", has_text="Sign in"))
    assert "were not accepted" in tab.locator("p.error").inner_text()
    assert tab.context.cookies() == []
    _sign_in(tab, gw.url, keys["reader"])
    assert tab.locator("table.grid a").all_inner_texts() == ["orders"]
    tab.goto(f"{gw.url}/ui/topics/orders/0?offset=0&count=5")
    assert [r["offset"] for r in shown_rows(tab)] == [0, 1, 2, 3, 4]
    assert tab.locator("form.download").count() == 0  # --no-console-downloads
    response = tab.goto(f"{gw.url}/ui/topics/orders/0/download?from=0&until=9")
    assert response is not None and response.status == 400
    assert "downloads are turned off" in tab.locator("main").inner_text()
    tab.context.clear_cookies()
    _sign_in(tab, gw.url, keys["looker"])
    assert tab.locator("table.grid a").all_inner_texts() == ["orders"]
    tab.goto(f"{gw.url}/ui/topics/orders/0?offset=0")
    assert shown_rows(tab) == []
    assert "not read its records" in tab.locator("p.error").inner_text()
    for path in (
        "/records/3",
        "/search?value=a&run=1",
    ):
        response = tab.goto(f"{gw.url}/ui/topics/orders/0{path}")
        assert response is not None and response.status == 403, path
    tab.context.clear_cookies()
    _sign_in(tab, gw.url, keys["nobody"])
    assert tab.locator("table.grid a").all_inner_texts() == []
    response = tab.goto(f"{gw.url}/ui/topics/orders/0?offset=0")
    assert response is not None and response.status == 403
    denied = tab.locator("main").inner_text()
    response = tab.goto(f"{gw.url}/ui/topics/no-such-topic/0?offset=0")
    assert response is not None and response.status == 403
    # a topic it may not describe answers exactly as one that does not exist
    assert denied == tab.locator("main").inner_text().replace("no-such-topic", "orders")
    # the browser's console line for each 4xx page asked on purpose
    watch.errors = [e for e in watch.errors if "status of 40" not in e]


def test_the_keyboard_pages_and_focuses_the_search(
    demo_gw: Served, page: tuple[Page, Watch]
) -> None:
    tab = watched(page, demo_gw)
    tab.goto(f"{demo_gw.url}/ui/topics/orders/0?offset=0&count=10")
    tab.keyboard.press("n")
    tab.wait_for_url("**offset=10**")
    assert shown_rows(tab)[0]["offset"] == 10
    tab.keyboard.press("p")
    tab.wait_for_url("**offset=0**")
    tab.keyboard.press("/")
    assert tab.evaluate("document.activeElement.name") == "key"
    tab.keyboard.press("Tab")  # plain tab order reaches every field and button
    assert tab.evaluate("document.activeElement.name") == "value"


def test_browsing_works_without_javascript(demo_gw: Served, browser: Browser) -> None:
    context = browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    watch = Watch(demo_gw.url)
    watch.attach(tab)
    try:
        tab.goto(f"{demo_gw.url}/ui/")
        follow(tab, tab.get_by_role("link", name="payments"))
        follow(tab, tab.get_by_role("link", name="1", exact=True))
        tab.wait_for_url("**offset=**")
        first = shown_rows(tab)
        follow(tab, tab.locator("a[rel=next]"))
        follow(tab, tab.locator("a[rel=prev]"))
        assert shown_rows(tab) == first
        long = tab.locator("details.long").first  # long values open with no script
        if long.count():
            long.locator("summary").click()
            assert long.get_attribute("open") is not None
        tab.fill("form.search input[name=value]", "EUR")
        follow(tab, tab.locator("form.search button"))
        follow(tab, tab.locator("button", has_text="Start the search"))
        tab.wait_for_selector("p.stopped", state="attached")
        assert not tab.locator("button.cancel").is_visible()  # it needs the script
        assert tab.locator("article.match").count() > 0
    finally:
        context.close()
    watch.clean()
