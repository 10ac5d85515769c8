"""Sub-commands of the ``tiered-gateway`` console script, one module each (argparse wiring in
:mod:`gateway.cli`). Heavy imports happen inside the commands, so ``--help`` stays fast."""
