"""What the serving layer raises when a store cannot be read."""

from __future__ import annotations


class StoreUnavailable(RuntimeError):
    """A store cannot be read. Its text names only the component, so it can be shown to a user;
    `detail` (the driver's message: hosts, ports, Java exceptions) is for the log."""

    def __init__(self, component: str, detail: str) -> None:
        super().__init__(f"{component} cannot be read")
        self.component = component
        self.detail = detail
