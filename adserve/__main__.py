from adserve.cli import main

raise SystemExit(main())
