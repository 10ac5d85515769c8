"""``python -m tests.realkafka``: the real-Kafka checks (``make real-kafka``)."""

from tests.realkafka.checks import main

main()
