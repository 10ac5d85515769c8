"""Issue 28: every surface of the gateway reads the buckets a real Kafka broker (4.1) and the
real Aiven plugin (1.0.0) wrote exactly as Kafka's own clients and tools read them
(:mod:`tests.realkafka.checks`; ``make real-kafka`` prints the same report)."""

from __future__ import annotations

import pytest

from tests.realkafka.checks import run

pytestmark = pytest.mark.timeout(1200)


def test_every_surface_reads_what_real_kafka_wrote(capsys: pytest.CaptureFixture[str]) -> None:
    report = run(emit=lambda _line: None)
    failed = [line for line in report.lines if line.startswith("FAIL")]
    with capsys.disabled():
        print("\n" + report.summary())
    assert report.checks >= 100, f"only {report.checks} checks ran"
    assert not failed, "\n".join(failed)
    assert report.differences == 0
