from core.cli.main import main

raise SystemExit(main())
