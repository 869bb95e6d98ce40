import sys

from slinkyml.cli import main

sys.exit(main())
