"""The errors aioloader raises.

Bad arguments raise the built-in ``ValueError`` or ``TypeError`` with a message that
names the argument, the rule and the value seen. Everything else derives from one root::

    AioloaderError
     +-- BufferReleasedError   (also RuntimeError) a batch was used after release()
     +-- LoaderClosedError     (also RuntimeError) a finished or closed stream was used
     +-- CollateError          (also RuntimeError) samples that cannot be stacked (the
     |                         messages of torch's default_collate, for familiarity)
     +-- WorkerDiedError       (also RuntimeError) a build worker process ended mid-step
     +-- ResumeMismatchError   (also ValueError) a resume whose input or settings changed
     +-- WriterConflictError   (also RuntimeError) two writers on one shard destination
     +-- SourceError           (also OSError) a data source could not deliver a sample
          +-- ObjectNotFoundError   a key or path that does not exist
          +-- MalformedShardError   a tar shard that is truncated or malformed

An exception raised while building a batch keeps its own type; a note added with
``add_note`` names the global step, the slot and the dataset index.
"""

from __future__ import annotations


class AioloaderError(Exception):
    """Root of every error type defined by aioloader."""


class BufferReleasedError(AioloaderError, RuntimeError):
    """A batch or pooled buffer was used after it was released."""


class LoaderClosedError(AioloaderError, RuntimeError):
    """A stream that has finished, failed or been closed was used again."""


class CollateError(AioloaderError, RuntimeError):
    """Samples of one batch cannot be collated together (unequal sizes, for example)."""


class SourceError(AioloaderError, OSError):
    """A data source could not deliver a sample."""


class ObjectNotFoundError(SourceError):
    """The key or path of a sample does not exist."""


class MalformedShardError(SourceError):
    """A tar shard is truncated or malformed."""


class WorkerDiedError(AioloaderError, RuntimeError):
    """A build worker process ended (crash, signal, ``os._exit``) before its batch was built.

    Attributes:
        worker: The worker's number, ``0 .. workers-1``.
        exitcode: Its exit status; ``-N`` when killed by signal ``N``.
    """

    def __init__(self, message: str, worker: int, exitcode: int | None) -> None:
        super().__init__(message)
        self.worker = worker
        self.exitcode = exitcode

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.worker, self.exitcode), self.__dict__)


class ResumeMismatchError(AioloaderError, ValueError):
    """A resume was refused: the input or a setting differs from what the manifest recorded."""


class WriterConflictError(AioloaderError, RuntimeError):
    """Another writer holds the destination's lease, or changed its manifest under this one."""
