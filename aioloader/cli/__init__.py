"""The ``aioloader`` command: ``demo``, ``digest``, ``plan``, ``tune``, ``bench``, ``ingest``.

One module per subcommand (``_demo``, ``_digest``, ``_plan``, ``_tune``, ``_bench``), each
with ``add_parser(commands)`` and ``run(args) -> lines``; ``main`` prints the lines only when
the subcommand succeeded, so an error never follows half a table.
"""

from ._app import build_parser as build_parser
from ._app import main as main

__all__ = ("build_parser", "main")
