"""``sluice``: entry point (commands are filled in by their modules)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_p = sub.add_parser("serve", help="run the daemon in the foreground")
    serve_p.add_argument("--config")
    args = parser.parse_args(argv)
    if args.command == "serve":
        from daemon.main import serve

        return serve(args.config)
    return 2


if __name__ == "__main__":
    sys.exit(main())
