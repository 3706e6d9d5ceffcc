"""``python -m tether.cli``: the same as the ``tether`` command."""

import sys

from tether.cli.main import main

sys.exit(main())
