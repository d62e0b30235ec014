"""What every resolver gets: the process context, the caller, the request's DataLoaders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.api.errors import FORBIDDEN, UNAUTHENTICATED, ApiError
from app.api.loaders import Loaders
from app.auth import OPERATOR, AuthError, Principal
from app.infra.context import AppContext


@dataclass
class ApiContext:
    """Per HTTP request, or per WebSocket connection (then `principal` is set at connection_init)."""

    app: AppContext
    loaders: Loaders
    principal: Principal | None = None
    request: Any = None
    response: Any = None
    websocket: bool = False
    connection_params: dict[str, Any] = field(default_factory=dict)

    def viewer(self) -> Principal:
        """The authenticated caller; every root field calls this first."""
        if self.principal is None:
            raise ApiError("authentication required: send 'Authorization: Bearer <token>'", UNAUTHENTICATED)
        return self.principal

    def operator(self) -> Principal:
        """The caller, who must hold the operator role; over HTTP a refusal answers 403."""
        principal = self.viewer()
        try:
            principal.require(OPERATOR)
        except AuthError as exc:
            if self.response is not None and not self.websocket:
                self.response.status_code = 403
            raise ApiError(exc.message, FORBIDDEN) from None
        return principal
