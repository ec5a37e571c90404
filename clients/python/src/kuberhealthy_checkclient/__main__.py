"""``python -m kuberhealthy_checkclient ok | fail REASON... | wait``: the checker client's command line."""
import sys

from kuberhealthy_checkclient import main

sys.exit(main())
