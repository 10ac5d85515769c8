from __future__ import annotations

from pathlib import Path

import pytest

from gateway.demo import DemoBucket
from tests.unit.scrub.helpers import Bucket, copy_bucket


@pytest.fixture
def bucket(demo: DemoBucket, tmp_path: Path) -> Bucket:
    """A copy of the demo bucket (``demo``, tests/fixtures/demo.py) for one test to break."""
    return copy_bucket(demo, tmp_path)
