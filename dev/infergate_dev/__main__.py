"""`python -m infergate_dev ...`: the same as the `infergate-dev` command."""

import sys

from infergate_dev.cli import main

sys.exit(main())
