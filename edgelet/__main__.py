"""`python -m edgelet`: runs the command line and exits with its status."""

import sys

from edgelet.cli import main

if __name__ == "__main__":
    sys.exit(main())
