"""One Fetch request's share of the service's byte budget (``inflight_bytes``).

``max_bytes`` is shared in request order: each partition's read reserves its share (its
``partition_max_bytes`` within what is left of the request's ``max_bytes``) from the
:class:`~gateway.service.admission.ByteBudget` the HTTP API's reads draw on too, and gives
back what it did not use; once the answer is cut to ``max_bytes`` the reservation is released
down to its size, and held until the answer is sent (the batches are views of the bytes read).
docs/kafka-listener.md ("Fetch, as the code implements it") gives the whole rule.
"""

from __future__ import annotations

import asyncio

from gateway.deadline import Deadline
from gateway.service.admission import ByteBudget


class Reservation:
    """One request's share of ``inflight_bytes``: reserved read by read, within what is left
    of the request's ``max_bytes`` (Kafka's readFromLog with the remaining bytes), given back
    as reads turn out smaller, and released down to the answer once it is cut.

    Once nothing is left, a read waits for the reads under way (they may give bytes back);
    when they are done and still nothing is left, the bytes are held by answers with records
    and :meth:`take` answers 0: the partition is not read (Kafka's minOneMessage is for the
    first partition with data only), so a spent ``max_bytes`` reads no more batches."""

    def __init__(self, budget: ByteBudget, total: int, deadline: Deadline) -> None:
        self._budget = budget
        self._deadline = deadline
        self.left = total
        self.held = 0
        self._reading = 0  # reads holding a share, not done
        self._changed = asyncio.Event()  # set (and replaced) when one of them is done

    async def take(self, wanted: int) -> int:
        """Reserve a read's share (at most ``wanted``, within what is left); 0: nothing is
        left and no read under way can give any back, the partition is not to be read. A
        share taken is ended by :meth:`done` once the read has given back what it did not
        use; a share refused (the budget did not free up in time) ends itself."""
        while self.left <= 0 and self._reading:
            await self._changed.wait()
        if self.left <= 0:
            return 0
        asked = min(wanted, self.left)  # taken from the request before waiting for the budget,
        self.left -= asked  # so reads waiting together do not each take what is left
        self._reading += 1
        try:
            n = await self._budget.acquire(asked, self._deadline)
        except BaseException:
            self.left += asked
            self.done()
            raise
        self.held += n
        self.left += asked - n
        return n

    def done(self) -> None:
        """A read that took a share has given back what it did not use."""
        self._reading -= 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def give_back(self, n: int, *, to_request: bool = True) -> None:
        n = min(n, self.held)
        if n <= 0:
            return
        self.held -= n
        if to_request:
            self.left += n
        self._budget.release(n)

    def keep(self, n: int) -> None:
        """Release all but ``n`` bytes (the answer's size)."""
        self.give_back(self.held - n, to_request=False)

    def release(self) -> None:
        self.give_back(self.held, to_request=False)
