"""``python -m benchmarks.vs_sdp``: measure, or re-render saved results (``--help``)."""

import sys

from benchmarks.vs_sdp.cli import main

sys.exit(main())
