"""Frontend side of the engine core: requests in, outputs out.

InprocClient runs the core in this process (debugging, unit tests). The multi-process client
(engine core in its own process, ZMQ + msgspec) implements the same interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from vgraph.config import VGraphConfig
from vgraph.engine.protocol import EngineCoreOutputs, EngineCoreRequest


class EngineDeadError(RuntimeError):
    """The engine core process died; no request in flight can complete."""


class EngineCoreClient(ABC):
    @abstractmethod
    def add_request(self, request: EngineCoreRequest) -> None: ...

    @abstractmethod
    def abort_requests(self, request_ids: list[str]) -> None: ...

    @abstractmethod
    def get_output(self) -> EngineCoreOutputs:
        """The next step's outputs (blocks until the core produces some)."""

    @abstractmethod
    def shutdown(self) -> None: ...


class InprocClient(EngineCoreClient):
    def __init__(self, config: VGraphConfig) -> None:
        from vgraph.engine.core import EngineCore

        self.core = EngineCore(config)

    def add_request(self, request: EngineCoreRequest) -> None:
        self.core.add_request(request)

    def abort_requests(self, request_ids: list[str]) -> None:
        self.core.abort_requests(request_ids)

    def get_output(self) -> EngineCoreOutputs:
        return self.core.step()

    def shutdown(self) -> None:
        self.core.shutdown()
