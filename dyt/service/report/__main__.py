"""`python -m dyt.service.report` is not the command: the report runs through dyt's CLI."""

import sys

sys.exit("run through the CLI: python -m dyt report")
