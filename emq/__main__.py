import sys

from emq.cli import main

sys.exit(main())
