from __future__ import annotations

from pathlib import Path

import pytest

from gateway.demo import DemoBucket, write_demo_bucket
from tests.unit.scrub.helpers import Bucket, copy_bucket


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoBucket:
    """Built once: the tests only read it (``bucket`` gives each test a copy to break)."""
    return write_demo_bucket(tmp_path_factory.mktemp("scrub-demo"))


@pytest.fixture
def bucket(demo: DemoBucket, tmp_path: Path) -> Bucket:
    return copy_bucket(demo, tmp_path)
