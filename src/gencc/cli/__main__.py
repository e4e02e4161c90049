"""`python -m gencc.cli`: the `gencc` command line."""

from . import main

main()
