"""The remote log metadata manager (RLMM): KIP-405 segment metadata and its sources.

* :mod:`~gateway.metadata.model`: segment ids, metadata, updates, partition deletes, states.
* :mod:`~gateway.metadata.manager`: Kafka's cache semantics over an ordered key-value backend.
* :mod:`~gateway.metadata.backend` / :mod:`~gateway.metadata.sqlite`: the backends.
* :mod:`~gateway.metadata.serde`, :mod:`~gateway.metadata.partitioner`,
  :mod:`~gateway.metadata.replay`: the ``__remote_log_metadata`` topic.
"""
