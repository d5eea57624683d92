"""`python -m dyt`: the service's command line (dyt.service.cli)."""

import sys

from dyt.service.cli import main

if __name__ == "__main__":
    sys.exit(main())
