"""Command line: ``spherepde run [scenario.toml] [--out DIR] [--fresh]`` and
``spherepde --version``.

Every failure a user can cause (a bad scenario, an unusable output folder, a folder in use)
ends in one line on stderr and exit code 2; Ctrl-C ends with exit code 130 and says what
finished; a run that stops for numerical reasons exits with 3.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import ConfigError

#: Exit codes: 2 for bad input (as argparse does), 130 = 128 + SIGINT for Ctrl-C.
EXIT_BAD_INPUT, EXIT_NUMERICS, EXIT_INTERRUPTED = 2, 3, 130


def _error(text: str, code: int) -> int:
    print(f"spherepde: {text}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="spherepde",
        description="Mean-field dynamics of self-attention on the sphere.")
    parser.add_argument("--version", action="version", version=f"spherepde {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario (the built-in default when no file is given)")
    run.add_argument("config", nargs="?", default=None,
                     help="TOML scenario file (keys: see the README); default: built-in scenario")
    run.add_argument("--out", default=None, help="output folder (default: [output] dir)")
    run.add_argument("--fresh", action="store_true",
                     help="recompute every run instead of reusing finished ones in OUT/runs")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--no-figures", dest="figures", action="store_false",
                     help="skip the figures (results.npz, summary.md and scenario.json only)")
    run.add_argument("--force", action="store_true",
                     help="write into a non-empty folder that spherepde did not create (files "
                          "of the names it writes are replaced there)")
    run.add_argument("--yes", action="store_true",
                     help="run even when the scenario's estimated cost is hours")
    run.add_argument("--workers", type=int, default=None,
                     help="processes computing runs side by side (default: one per core for "
                          "scenarios large enough to repay starting them, else 1)")
    run.set_defaults(handler=_run)

    plot = sub.add_parser("plot", help="redraw the figures of a saved run without recomputing")
    plot.add_argument("results", help="results.nc of a run, or the run's output folder")
    plot.add_argument("--out", default=None,
                      help="folder for the figures (default: the folder of results.nc)")
    plot.add_argument("--no-animation", action="store_true", help="skip the GIF/MP4 animation")
    plot.add_argument("--force", action="store_true",
                      help="write into a non-empty folder that spherepde did not create")
    plot.set_defaults(handler=_plot)

    sweep = sub.add_parser("sweep", help="run a parameter sweep on Dask (see docs/sweeps.md)")
    sweep.add_argument("config", help="TOML sweep file: [sweep], [base], [axes]")
    sweep.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="address of a running Dask scheduler (tcp://host:8786); default: a "
                            "local cluster with one worker per core")
    sweep.add_argument("--workers", type=int, default=None,
                       help="number of local workers (default: one per core)")
    sweep.add_argument("--out", default=None, help="output folder (default: [sweep] out)")
    sweep.add_argument("--force", action="store_true",
                       help="write into a non-empty folder that spherepde did not create")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.set_defaults(handler=_sweep)

    info = sub.add_parser("info", help="versions, backends found, and where results go")
    info.set_defaults(handler=_info)
    return parser


def _run(args) -> int:
    from ..timestepping import StepSizeError
    from .scenario import OutputError, RunInterrupted, run_scenario

    try:
        if args.workers is not None and args.workers < 1:
            return _error(f"--workers must be >= 1; got {args.workers}", EXIT_BAD_INPUT)
        res = run_scenario(args.config, out=args.out, fresh=args.fresh, progress=not args.quiet,
                           figures=args.figures, force=args.force, yes=args.yes,
                           workers="auto" if args.workers is None else args.workers)
    except ConfigError as exc:
        return _error(f"invalid scenario: {exc}", EXIT_BAD_INPUT)
    except OutputError as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    except RunInterrupted as exc:
        return _error(f"interrupted: {exc}", EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        return _error("interrupted before any run finished; run the same command again to "
                      "start", EXIT_INTERRUPTED)
    except OSError as exc:  # the disk filled up, the folder vanished, ...
        where = f" ({exc.filename})" if exc.filename else ""
        return _error(f"cannot write the results{where}: {exc.strerror or exc}",
                      EXIT_BAD_INPUT)
    except RecursionError:
        return _error("invalid scenario: the file nests arrays or tables too deeply to read",
                      EXIT_BAD_INPUT)
    except (FloatingPointError, StepSizeError) as exc:
        return _error(f"the run stopped: {exc}", EXIT_NUMERICS)
    except ValueError as exc:  # a solver refusing the scenario's settings (e.g. lmax too low)
        return _error(f"the scenario cannot run: {exc}", EXIT_BAD_INPUT)
    print(res["summary"])
    n = len(res["runs"])
    if res["reused"]:
        print(f"spherepde: {res['reused']} of {n} runs reused from {res['out'] / 'runs'} "
              "(--fresh recomputes them)")
    print(f"spherepde: results written to {res['out'].resolve()}")
    return 0


def _plot(args) -> int:
    from .. import io
    from .plotting import plot_results
    from .results import load_results
    from .scenario import FIGURE_NAMES, FORCE_FLAG

    try:
        ds = load_results(args.results)
    except (FileNotFoundError, ValueError) as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    src = Path(args.results)
    folder = Path(args.out) if args.out else (src if src.is_dir() else src.parent)
    try:
        manifest = io.Manifest.open(folder, "run", force=args.force, override=FORCE_FLAG)
        folder.mkdir(parents=True, exist_ok=True)
        with io.FolderLock(folder):  # a run writing the folder meanwhile is waited for
            names = FIGURE_NAMES if not args.no_animation else FIGURE_NAMES[:4]
            manifest.add(*names)
            written = plot_results(ds, folder, animate=not args.no_animation,
                                   warn=lambda text: print(f"spherepde: {text}",
                                                           file=sys.stderr))
    except io.FolderBusyError as exc:
        return _error(f"{exc}: a spherepde run is writing there; plot when it has finished",
                      EXIT_BAD_INPUT)
    except OSError as exc:
        return _error(f"cannot write the figures to {folder}: {exc.strerror or exc}",
                      EXIT_BAD_INPUT)
    for path in written:
        print(path)
    return 0 if written else 1


def _sweep(args) -> int:
    from .sweep import SweepError, run_sweep

    if args.workers is not None and args.workers < 1:
        return _error(f"--workers must be >= 1; got {args.workers}", EXIT_BAD_INPUT)
    try:
        res = run_sweep(args.config, scheduler=args.scheduler, n_workers=args.workers,
                        out=args.out, progress=not args.quiet, force=args.force)
    except (SweepError, ConfigError) as exc:
        return _error(f"invalid sweep: {exc}", EXIT_BAD_INPUT)
    except RecursionError:
        return _error("invalid sweep: the file nests arrays or tables too deeply to read",
                      EXIT_BAD_INPUT)
    except OSError as exc:  # scheduler unreachable, folder not writable
        return _error(f"the sweep could not run: {exc}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return _error("interrupted; finished tasks are saved, run the same command again to "
                      "resume", EXIT_INTERRUPTED)
    n = len(res["done"]) + len(res["skipped"]) + len(res["failed"])
    print(f"spherepde: {len(res['done'])} tasks computed, {len(res['skipped'])} reused, "
          f"{len(res['failed'])} failed, of {n}")
    print(f"spherepde: results gathered in {(res['out'] / 'sweep.nc').resolve()}")
    if res["figure"] is not None:
        print(f"spherepde: phase diagram in {Path(res['figure']).resolve()}")
    return 1 if res["failed"] else 0


def _info(args) -> int:
    from .info import info_text

    print(info_text())
    return 0


def main(argv=None) -> int:
    from .._numba_target import use_wide_vectors

    # the warm-up compiled numba's cache for these CPU features: load it rather than recompile
    use_wide_vectors()
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
