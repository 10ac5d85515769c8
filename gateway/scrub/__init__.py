"""``tiered-gateway scrub``: an integrity audit of a tiered-storage bucket.

The core is framework-free and blocking: :func:`inventory` (one listing: segments, orphans,
unrecognised keys), :func:`audit_segment` (one segment: manifest, data key, chunks, batches,
indexes), :func:`check_continuity` (offsets across a partition's segments). ``job`` runs the
segment audits on Spark (pyspark is an optional extra: import it only from there).
"""

from gateway.scrub.audit import SegmentAudit, audit_segment
from gateway.scrub.continuity import SegmentRange, check_continuity
from gateway.scrub.findings import Finding, Severity
from gateway.scrub.inventory import Inventory, SegmentObjects, inventory

__all__ = [
    "Finding",
    "Inventory",
    "SegmentAudit",
    "SegmentObjects",
    "SegmentRange",
    "Severity",
    "audit_segment",
    "check_continuity",
    "inventory",
]
