from metastore.node.cli import main

raise SystemExit(main())
