"""The demo bucket: several topics written as a broker would, tiered into a local folder.

:func:`write_demo_bucket` is what ``tiered-gateway demo`` serves; :mod:`gateway.demo.topics`
says what each topic holds and :mod:`gateway.demo.log` writes the broker partition folders.
"""

from gateway.demo.bucket import (
    DemoBucket,
    PartitionSummary,
    TopicSummary,
    write_demo_bucket,
    write_demo_bucket_async,
)

__all__ = [
    "DemoBucket",
    "PartitionSummary",
    "TopicSummary",
    "write_demo_bucket",
    "write_demo_bucket_async",
]
