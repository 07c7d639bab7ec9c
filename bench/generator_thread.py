"""The traffic generator (ingest.generator.produce) in a background thread, for the speed-layer benchmarks."""

from __future__ import annotations

import threading

from definitions.settings import Settings
from ingest.generator import GeneratorConfig, SendReport, produce


class Background:
    """The generator in a thread."""

    def __init__(self, settings: Settings, config: GeneratorConfig) -> None:
        self.report: SendReport | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(settings, config), daemon=True, name="bench-generator")

    def _run(self, settings: Settings, config: GeneratorConfig) -> None:
        try:
            self.report = produce(settings, config, None)
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def start(self) -> Background:
        self.thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"background producer failed: {self.error!r}") from self.error
