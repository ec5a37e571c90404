"""`python -m release build|push|rehearse` (`make release-build`, `make release-push`, `make release-test`)."""
import sys

from release.rehearse import main

if __name__ == "__main__":
    sys.exit(main())
