"""`python -m cli`: the same as the `hamiadmin` console script."""

from cli.main import main

raise SystemExit(main())
