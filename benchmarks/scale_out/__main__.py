"""python -m benchmarks.scale_out"""

from benchmarks.scale_out.cli import main

raise SystemExit(main())
