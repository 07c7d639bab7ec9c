"""One `lambdactl up` or `down` at a time per state directory (and one `views apply`).

Two at once each launched the stores (both saw none running, and both passed the port checks as
nothing was bound yet); the second pid file hid the first process. A second one now waits for the
first, saying so, and then finds what the first did."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from definitions.files import UntrustedStateDir, state_lock
from infra.errors import StackError


@contextmanager
def stack_lock(state_dir: Path, say: Callable[[str], None] = lambda _: None) -> Iterator[None]:
    """state_lock's stack.lock; StackError for a state directory others can change."""
    with ExitStack() as held:
        try:
            held.enter_context(state_lock(state_dir, "stack.lock", "lambdactl up or down", say))
        except UntrustedStateDir as exc:
            raise StackError("settings", str(exc)) from None
        yield
