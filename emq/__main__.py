import sys

from emq.cli.main import main

sys.exit(main())
