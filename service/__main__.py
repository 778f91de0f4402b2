from kameleon.service.cli import main

raise SystemExit(main())
