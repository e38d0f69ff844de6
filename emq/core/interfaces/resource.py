"""The lifetime every resource of the seams shares: ``async with`` or ``aclose()``."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self


class AsyncResource(abc.ABC):
    """Something holding connections or tasks: use ``async with`` or call ``aclose()``."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release every connection and task; calling it twice is harmless."""
