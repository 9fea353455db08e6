"""``with`` for the test servers: the block starts the server and stops it, however it ends."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

ServerT = TypeVar("ServerT", bound="StartedWith")


class StartedWith:
    """A server that ``with`` starts on entry and stops on exit (``stop`` is idempotent)."""

    def start(self) -> object:
        """Start serving (what it returns is the subclass's own)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop serving; calling it again does nothing."""
        raise NotImplementedError

    def __enter__(self: ServerT) -> ServerT:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
