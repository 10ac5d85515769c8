"""Sub-commands of the ``tiered-gateway`` console script, one module each with ``add_parser``
and ``run`` (:mod:`gateway.cli` only dispatches). Heavy imports happen inside the commands, so
``--help`` stays fast."""
