"""CallSlots: at most `limit` calls at once, the others served in the order they came."""

from __future__ import annotations

import asyncio

from bridge.call_slots import CallSlots


async def test_holders_never_exceed_the_limit_and_waiters_go_in_order() -> None:
    slots = CallSlots(2)
    inside, most, order = 0, 0, []
    gate = asyncio.Event()

    async def call(n: int) -> None:
        nonlocal inside, most
        async with slots:
            inside += 1
            most = max(most, inside)
            order.append(n)
            await gate.wait()
            inside -= 1

    tasks = [asyncio.create_task(call(n)) for n in range(6)]
    await asyncio.sleep(0)
    assert order == [0, 1]
    gate.set()
    await asyncio.gather(*tasks)
    assert most == 2
    assert order == list(range(6))
    async with slots, slots:  # both slots are free again
        pass


async def test_a_canceled_waiter_gives_up_its_place_or_passes_its_slot_on() -> None:
    slots = CallSlots(1)
    await slots.__aenter__()
    gone = asyncio.create_task(slots.__aenter__())
    handed = asyncio.create_task(slots.__aenter__())
    last = asyncio.create_task(slots.__aenter__())
    await asyncio.sleep(0)
    gone.cancel()  # canceled while waiting: its place goes
    await asyncio.sleep(0)
    await slots.__aexit__(None, None, None)  # handed to `handed`...
    handed.cancel()  # ...canceled before it ran: the slot passes to `last`
    await asyncio.wait_for(last, 1)
    assert gone.cancelled() and handed.cancelled()
    assert not slots._waiters
    await slots.__aexit__(None, None, None)
    async with slots:  # the one slot is free again
        pass
