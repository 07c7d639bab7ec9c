"""Puts into one HBase table through several Thrift connections at once.

A Thrift call waits for the server's answer; alone, a writer makes no puts meanwhile, and the
server waits while the next batch is made. Here the caller makes the cells and hands them over in
batches; `senders` threads, each with its own connection, send them. At most `senders` batches wait
besides those being sent, so memory stays bounded whatever the input's size. The first failure of
any sender is raised to the caller, and no batch is sent after it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable

Cells = dict[bytes, bytes]


def send_puts(
    connect: Callable[[], object],
    table: str,
    cells: Iterable[tuple[bytes, Cells]],
    batch_size: int,
    senders: int,
) -> int:
    """Put every (row, {column: value}) of `cells` into `table`; the number of rows put."""
    batches: queue.Queue[list[tuple[bytes, Cells]] | None] = queue.Queue(maxsize=senders)
    failures: list[BaseException] = []

    def send() -> None:
        try:
            connection = connect()
            try:
                target = connection.table(table)  # type: ignore[attr-defined]
                while (batch := batches.get()) is not None:
                    if failures:
                        continue  # another sender failed: nothing more is sent, the rest is drained
                    puts = target.batch()
                    for row, data in batch:
                        puts.put(row, data)
                    puts.send()
            finally:
                connection.close()  # type: ignore[attr-defined]
        except BaseException as exc:  # noqa: BLE001 - raised to the caller below
            failures.append(exc)
            while batches.get() is not None:  # the caller never waits on a full queue
                pass

    threads = [threading.Thread(target=send, name=f"hbase-puts-{table}-{i}", daemon=True) for i in range(senders)]
    for thread in threads:
        thread.start()
    rows = 0
    try:
        batch: list[tuple[bytes, Cells]] = []
        for cell in cells:
            batch.append(cell)
            if len(batch) >= batch_size:
                if failures:
                    break
                batches.put(batch)
                rows += len(batch)
                batch = []
        if batch and not failures:
            batches.put(batch)
            rows += len(batch)
    finally:
        for _ in threads:
            batches.put(None)
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    return rows
