"""Allow ``python -m evalsweep``."""

from evalsweep.cli import main

main()
