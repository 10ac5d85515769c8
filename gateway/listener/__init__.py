"""A read-only Kafka-protocol listener over the service core (issue 19).

``serve --kafka-listener HOST:PORT`` answers the requests a consumer that assigns partitions
sends (ApiVersions, Metadata, ListOffsets, Fetch; the group APIs and DescribeConfigs
(``groups``), Produce with typed errors) from :class:`gateway.service.protocol.Service`, in
the same process and event loop as the HTTP API. Like :mod:`gateway.api`, it is a thin layer:
every read goes through the service; record batches are sent as stored (views of the bytes the
fetch read), never re-encoded.

* :mod:`~gateway.listener.framing`: size-prefixed frames, request headers, response frames;
* :mod:`~gateway.listener.codes`: Kafka error codes for the gateway's errors;
* :mod:`~gateway.listener.fetch`: Fetch, the reads of one request and their deadline; its
  plan (:mod:`~gateway.listener.fetch_plan`: partitions, ACLs, topic ids), its share of the
  byte budget (:mod:`~gateway.listener.fetch_share`) and its response, encoded around the
  batch views (:mod:`~gateway.listener.fetch_wire`);
* :mod:`~gateway.listener.dispatch`: a request frame to its handler: the version table
  (and ApiVersions), the one dispatch table, the SASL gate;
* :mod:`~gateway.listener.handlers`: Metadata and Produce; :mod:`~gateway.listener.offsets`:
  ListOffsets;
* :mod:`~gateway.listener.failures`: a request's failed partitions, their codes and log line;
* :mod:`~gateway.listener.groups`: FindCoordinator (the gateway itself), OffsetFetch (no
  committed offsets), OffsetCommit and group membership refused, DescribeConfigs refused with
  a message: no group state is kept;
* :mod:`~gateway.listener.sasl`: SASL/PLAIN (API keys) and SASL/OAUTHBEARER (JWTs), and the
  TLS client certificate, mapped to the HTTP API's principals (its ACLs apply per topic);
* :mod:`~gateway.listener.metrics`: requests per API key, bytes, connections, SASL outcomes;
* :mod:`~gateway.listener.server`: the asyncio server (TLS, connection limit, idle timeout,
  audit lines); :mod:`~gateway.listener.startup`: the check ``serve`` runs, the TLS context,
  the sockets bound for ``serve --workers N``.

docs/kafka-listener.md says what works with which clients.
"""
