"""Allow ``python -m evalsweep.cli`` (as before the command line became a package)."""

from evalsweep.cli import main

main()
