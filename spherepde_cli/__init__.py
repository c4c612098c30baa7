"""The ``spherepde`` console command's entry point, kept apart from the package on purpose.

Importing :mod:`spherepde` loads numpy and scipy, which takes about a second; a Ctrl-C in that
second would otherwise end in a long traceback through the import machinery, printed before
any code of the command could catch it. This module imports nothing heavy: :func:`main` imports
the command line inside a ``try``, so that Ctrl-C at any moment ends in one line on stderr and
exit code 130 (128 + SIGINT).
"""
import sys

#: 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C.
EXIT_INTERRUPTED = 130


def main(argv=None) -> int:
    """Run ``spherepde`` with ``argv`` (default: the process's arguments); returns the exit code."""
    try:
        from spherepde.app.cli import main as cli_main

        return cli_main(argv)
    except KeyboardInterrupt:
        print("spherepde: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
