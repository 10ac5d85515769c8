"""The read core, pure code with no I/O: strict framing of remote segments, the checks that make
every answer prove itself complete, and read_committed verified against the control records.
Used alike by the service, the Spark executors and scrub."""
