"""The caches of decoded chunks: byte-bounded, single-flight, memory with an optional disk tier.

(Remote indexes have their own package, :mod:`indexcache`.)
"""
