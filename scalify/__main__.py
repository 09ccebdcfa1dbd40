"""`python -m scalify ...`: the same command line as `scalify ...`."""

from scalify.cli import main

raise SystemExit(main())
