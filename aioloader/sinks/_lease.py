"""The writer lease of a shard destination: one writer at a time, or a loud error.

The lease is an object beside the manifest (``manifest.json.lease``) naming its holder: a
random id, the host, the process id and when it expires. A writer takes it with a
conditional create (or a conditional replace of an expired lease, or of one whose holder
is a dead process of this host), renews it while it writes, and removes it when it
closes. A second writer on the same destination fails at once with an error naming the
holder. The manifest itself is written conditionally too (see ``TarShardWriter``), so even
a writer that lost its lease (paused past the expiry) cannot overwrite another's manifest.

Expiry compares wall clocks of different hosts: keep them in sync (NTP), and keep
``ttl`` well above the longest pause between two commits you expect.
"""

from __future__ import annotations

import datetime
import json
import os
import time
import uuid
from typing import Any

from .._errors import WriterConflictError
from ..core import real
from ._destination import Destination, VersionConflictError, host_name, process_alive

__all__ = ("LEASE_NAME", "WriterLease")

LEASE_NAME = "manifest.json.lease"
_OPEN_HOLDERS: set[str] = set()  # holders of this process that have not released


def _when(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


class WriterLease:
    """The lease of one writer on ``destination`` (``acquire`` it before writing).

    Args:
        destination: Where the shards and the manifest go.
        ttl: Seconds a lease lasts unless renewed.
    """

    def __init__(self, destination: Destination, ttl: float = 600.0) -> None:
        if not real("lease ttl", ttl) > 0:
            raise ValueError(f"lease ttl must be a number of seconds > 0 but got {ttl!r}")
        self.destination = destination
        self.ttl = float(ttl)
        self.holder = uuid.uuid4().hex
        self.host = host_name()
        self.pid = os.getpid()
        self._version: str | None = None
        self._renewed = 0.0

    @property
    def held(self) -> bool:
        """Whether this writer holds the lease (acquired, not released)."""
        return self._version is not None

    def _body(self) -> bytes:
        now = time.time()
        facts = {"holder": self.holder, "host": self.host, "pid": self.pid}
        facts.update(acquired=now, expires=now + self.ttl, ttl=self.ttl)
        return json.dumps(facts).encode()

    def _stale(self, facts: dict[str, Any]) -> bool:
        if float(facts.get("expires", 0)) < time.time():
            return True
        if facts.get("host") != self.host:
            return False  # another host: only the expiry can tell
        pid = int(facts.get("pid", -1))
        if pid == self.pid:
            return facts.get("holder") not in _OPEN_HOLDERS
        return not process_alive(pid)

    def acquire(self) -> None:
        """Take the lease, or raise ``WriterConflictError`` naming the live holder."""
        where = self.destination.describe(LEASE_NAME)
        for _ in range(3):  # each turn loses only to a writer that took the lease meanwhile
            current = self.destination.read_versioned(LEASE_NAME)
            expected = None
            if current is not None:
                try:
                    facts = json.loads(current[0])
                except ValueError:
                    facts = {}
                if not isinstance(facts, dict):
                    facts = {}
                if not self._stale(facts):
                    raise WriterConflictError(
                        f"another writer holds this destination: {where} names holder "
                        f"{facts.get('holder')} on host {facts.get('host')} (pid "
                        f"{facts.get('pid')}) until {_when(float(facts.get('expires', 0)))}; "
                        "wait for it to finish, or, if it is dead on another host, for the "
                        "lease to expire (or delete the lease object)"
                    )
                expected = current[1]
            try:
                self._version = self.destination.put_conditional(LEASE_NAME, self._body(), expected)
            except VersionConflictError:
                continue
            self._renewed = time.monotonic()
            _OPEN_HOLDERS.add(self.holder)
            return
        raise WriterConflictError(f"could not take the writer lease {where}: it keeps changing")

    def due(self) -> bool:
        """Whether a third of the lease has passed since it was last renewed."""
        return self.held and time.monotonic() - self._renewed > self.ttl / 3

    def renew(self) -> None:
        """Extend the lease; ``WriterConflictError`` if another writer took it meanwhile."""
        if self._version is None:
            raise RuntimeError("the writer lease is not held")
        try:
            self._version = self.destination.put_conditional(
                LEASE_NAME, self._body(), self._version
            )
        except VersionConflictError:
            self._version = None
            _OPEN_HOLDERS.discard(self.holder)
            raise WriterConflictError(
                f"this writer lost its lease {self.destination.describe(LEASE_NAME)}: it "
                "expired and another writer took it; stopping so neither loses data"
            ) from None
        self._renewed = time.monotonic()

    def release(self) -> None:
        """Give the lease up (removes the lease object if it is still this writer's)."""
        version, self._version = self._version, None
        _OPEN_HOLDERS.discard(self.holder)
        if version is None:
            return
        current = self.destination.read_versioned(LEASE_NAME)
        if current is not None and current[1] == version:
            self.destination.delete(LEASE_NAME)
