"""`python -m mmcore COMMAND ...`: the same as the `minimind` command (mmcore/cli.py)."""
import sys

from mmcore.cli import main

sys.exit(main())
