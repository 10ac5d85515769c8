"""tiered-gateway: Kafka tiered-storage (KIP-405) history served straight from the bucket."""

__version__ = "0.1.0"
