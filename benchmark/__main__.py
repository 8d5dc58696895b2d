"""`python -m benchmark`: see benchmark/run.py."""

import sys

from benchmark.run import main

sys.exit(main())
