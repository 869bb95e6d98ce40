"""``python -m slinkyml.train``: see :mod:`slinkyml.train.loop`."""

import sys

from slinkyml.train.loop import main

sys.exit(main())
