"""`python -m mmcore COMMAND ...`: the same as the `minimind` command (mmcore/cli/)."""
import sys

from mmcore.cli import MODULE_NAME, main

sys.exit(main(prog=MODULE_NAME))
