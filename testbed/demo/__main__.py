"""`python -m testbed.demo` (`make demo`): the local demo (testbed/demo/local.py)."""
import sys

from testbed.demo.local import main

if __name__ == "__main__":
    sys.exit(main())
