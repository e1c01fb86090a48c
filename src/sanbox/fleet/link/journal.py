"""A host agent's journal of recent operations: each call carries an operation id, and a call
whose id was seen gets the first one's answer again instead of running twice (a control plane
that died mid-call, or a retry after a dropped link, learns what happened). Bounded: the oldest
outcomes go first; one still running is waited for, never run again."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

MAX_OUTCOMES = 4096

Answer = tuple[int, dict[str, Any]]  # HTTP status, body


class Journal:
    def __init__(self, size: int = MAX_OUTCOMES) -> None:
        self.size = size
        self._outcomes: OrderedDict[str, asyncio.Future[Answer]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._outcomes)

    async def once(self, op_id: str, run: Callable[[], Awaitable[Answer]]) -> tuple[Answer, bool]:
        """`run`'s answer for `op_id`, run at most once while the id is remembered; and whether
        this call is the one that ran it."""
        known = self._outcomes.get(op_id)
        if known is not None:
            return await asyncio.shield(known), False
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._outcomes[op_id] = future
        while len(self._outcomes) > self.size:
            oldest, done = next(iter(self._outcomes.items()))
            if not done.done():
                break  # never forget one still running
            del self._outcomes[oldest]
        try:
            answer = await run()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a later caller re-raises it
            raise
        future.set_result(answer)
        return answer, True
