import sys

from checkpoints_compare.compare import main

sys.exit(main())
