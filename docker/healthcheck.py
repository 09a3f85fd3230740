"""HEALTHCHECK of the service images: exit 0 when GET http://127.0.0.1:$PORT/healthz answers
200, else 1. ``healthcheck.py VARIABLE DEFAULT`` reads the port from the environment variable
VARIABLE (the same CLEPSYDRA_* setting the service listens on), DEFAULT when unset. Standard
library only: the image has no curl."""

import os
import sys
import urllib.request


def main() -> int:
    variable, default = sys.argv[1], sys.argv[2]
    port = os.environ.get(variable) or default
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as resp:
            return 0 if resp.status == 200 else 1
    except OSError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
