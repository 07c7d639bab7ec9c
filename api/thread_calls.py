"""Blocking work run in the thread pool, its exception raised in the request's task without the
reference cycle the pool's own raise makes.

An exception raised across `run_in_threadpool` stays in a cycle with the frames that awaited it, and
its traceback holds every frame it passed through with what each holds: a query's rows read before
a refusal (up to api.max_read_mib), a body's parse. Only a full collection frees a cycle, and the API
makes those rare (api.server.quiet_full_collections): a worker grew by what each refused request
had read. Here the exception comes back as a value and is raised from a frame that lets go of it,
so the request's frames and what they hold go when it is answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

T = TypeVar("T")


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc: BaseException | None = exc


def _caught(fn: Callable[..., T], args: tuple, kwargs: dict[str, Any]) -> T | _Raised:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - raised again in the request's task
        return _Raised(exc)


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`await run_in_threadpool(fn, *args, **kwargs)`, raising what `fn` raised (see above)."""
    outcome = await run_in_threadpool(_caught, fn, args, kwargs)
    if isinstance(outcome, _Raised):
        exc, outcome.exc = outcome.exc, None
        del outcome
        try:
            raise exc  # type: ignore[misc]
        finally:  # a frame holding the exception it raised is held by it (its traceback): a cycle
            del exc
    return outcome
