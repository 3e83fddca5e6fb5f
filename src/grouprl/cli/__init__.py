"""``grouprl`` command line: train, eval, plot, view, dashboard, report, init-model, list, rewards, generate,
grail-data, vllm-serve.

- ``parser.py``: the parser, one helper a command; ``config_flags.py``: the config fields as ``grouprl train``'s
  options (the flags, their lines in ``--help``, the values read back into a config).
- ``commands.py``: what each command runs. ``main`` (here) runs one and turns bad input into one line.
"""

from __future__ import annotations

import logging
import os
import sys

from grouprl.cli.config_flags import built_in_job, config_from_args
from grouprl.cli.parser import build_parser
from grouprl.config import ConfigError

__all__ = ["build_parser", "built_in_job", "config_from_args", "main"]

log = logging.getLogger("grouprl")


def main(argv: list[str] | None = None) -> int:
    # LOGLEVEL sets grouprl's loggers; other libraries stay at WARNING (DEBUG on the root logger
    # would bury grouprl's lines under matplotlib's and urllib3's).
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    if os.environ.get("LOGLEVEL"):
        logging.getLogger("grouprl").setLevel(os.environ["LOGLEVEL"].upper())
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, FileNotFoundError) as err:  # bad input: one line naming it (traceback with DEBUG)
        log.debug("traceback of the error below", exc_info=True)
        print(f"grouprl: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        from grouprl.run_errors import RUN_FAILURES  # imported here: torch is slow to import

        if not isinstance(err, RUN_FAILURES):
            raise  # an internal error: its traceback is the report
        log.debug("traceback of the error below", exc_info=True)
        print(f"grouprl: run stopped: {err}", file=sys.stderr)  # stopped on purpose: budget, disk, NaN, SIGTERM
        return int(getattr(err, "exit_code", 1))
