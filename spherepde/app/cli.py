"""Command line: ``spherepde run [scenario.toml] [--out DIR] [--fresh]``."""
from __future__ import annotations

import argparse
import sys

from .config import ConfigError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="spherepde",
        description="Mean-field dynamics of self-attention on the sphere.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario (the built-in default when no file is given)")
    run.add_argument("config", nargs="?", default=None,
                     help="TOML scenario file (keys: see the README); default: built-in scenario")
    run.add_argument("--out", default=None, help="output folder (default: [output] dir)")
    run.add_argument("--fresh", action="store_true",
                     help="recompute every run instead of reusing finished ones in OUT/runs")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    if args.command == "run":
        from .scenario import run_scenario

        try:
            res = run_scenario(args.config, out=args.out, fresh=args.fresh, progress=not args.quiet)
        except ConfigError as exc:
            print(f"spherepde: invalid scenario: {exc}", file=sys.stderr)
            return 2
        except FloatingPointError as exc:
            print(f"spherepde: the run stopped: {exc}", file=sys.stderr)
            return 3
        print(res["summary"])
        print(f"spherepde: results written to {res['out'].resolve()}")
        return 0
    return 1  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
