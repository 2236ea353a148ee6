from metastore.cli import main

raise SystemExit(main())
