"""A real Apache Kafka broker and its clients for the test suite (issue 28).

``jars`` fetches Kafka's jars from Maven Central into ``build/real-kafka``; ``broker`` formats
and runs a single-node KRaft broker with tiered storage on; ``java`` compiles and runs the
project's own small Java programs (a producer and the oracles, read with Kafka's clients);
``generate`` writes buckets through the real Aiven plugin and records what Kafka itself reads
from them; ``checks`` compares every surface of the gateway with those records
(``python -m tests.realkafka``).
"""
