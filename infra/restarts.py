"""The restart policy of the platform's processes (see stores.restarts for the status file).

supervisord runs the platform's processes (infra/supervision.py); its own `autorestart` restarts
at once and without limit, so restarts are decided here instead, by the event listener
(infra/restart_listener.py): after an exit, wait `restart_backoff_s`, doubled for every restart
already made within `restart_window_s` (at most `restart_backoff_max_s`); once `restart_max`
restarts were made within the window, the next exit is a restart loop and the process is given up.
"""

from __future__ import annotations

from dataclasses import dataclass

from definitions.settings import Settings


@dataclass(frozen=True)
class Budget:
    max_restarts: int
    window_s: float
    backoff_s: float
    backoff_max_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Budget:
        s = settings.stack
        return cls(s.restart_max, s.restart_window_s, s.restart_backoff_s, s.restart_backoff_max_s)

    def recent(self, restarts: list[float], now: float) -> list[float]:
        """The restarts (their times) that still count against the budget at `now`."""
        return [t for t in restarts if now - t < self.window_s]

    def delay(self, restarts: list[float], now: float) -> float | None:
        """Seconds to wait before the next restart, or None when the budget is spent."""
        made = len(self.recent(restarts, now))
        if made >= self.max_restarts:
            return None
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** min(made, 64))

    def describe(self) -> str:
        return f"at most {self.max_restarts} restarts within {self.window_s:.0f}s"
