"""HEALTHCHECK of the service images: exit 0 when GET http://127.0.0.1:$PORT/healthz answers
200, else 1. ``healthcheck.py VARIABLE [VARIABLE ...] DEFAULT`` reads the port from the first
of the environment variables that is set (the same CLEPSYDRA_* settings the service reads its
port from, in the order it reads them: the analytics exporter takes
CLEPSYDRA_ANALYTICS_EXPORTER_PORT, else CLEPSYDRA_ANALYTICS_PORT), DEFAULT when none is.
Standard library only: the image has no curl."""

import os
import sys
import urllib.request


def port(argv: list[str]) -> str:
    *variables, default = argv
    return next((os.environ[v] for v in variables if os.environ.get(v)), default)


def main() -> int:
    url = f"http://127.0.0.1:{port(sys.argv[1:])}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=4) as resp:
            return 0 if resp.status == 200 else 1
    except OSError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
