"""The caches between the service and the remote reader: segments opened once (manifest and
data key, :mod:`~gateway.cache.segments`, which also feeds :mod:`indexcache`), and decoded
chunks, byte-bounded and single-flight, in memory with an optional disk tier."""
