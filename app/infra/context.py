"""What every process shares: settings, the database engine and its session factory, the authenticator."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.auth import Authenticator, process_authenticator
from app.infra.config import Settings
from app.infra.db import Sessions, create_engine, read_session_factory, session_factory


@dataclass
class AppContext:
    """Process-wide handles, built once at start-up and closed at shutdown."""

    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    _authenticator: Authenticator | None = field(default=None, repr=False)
    _read_sessions: Sessions | None = field(default=None, repr=False)

    @property
    def read_sessions(self) -> Sessions:
        """Sessions for single-statement reads (API pages): autocommit on PostgreSQL, see app.infra.db."""
        if self._read_sessions is None:
            self._read_sessions = read_session_factory(self.engine, self.sessions)
        return self._read_sessions

    def authenticator(self) -> Authenticator:
        """The process's one authenticator (one JWKS cache), shared by the API and the dashboard; built on first use."""
        if self._authenticator is None:
            self._authenticator = process_authenticator(self.settings)
        return self._authenticator

    @classmethod
    def open(cls, settings: Settings) -> AppContext:
        """Create the engine (no connection is made until first use)."""
        engine = create_engine(settings.database_url)
        return cls(settings=settings, engine=engine, sessions=session_factory(engine))

    async def close(self) -> None:
        """Dispose of the engine's connections (and the authenticator's HTTP client)."""
        if self._authenticator is not None and hasattr(self._authenticator, "aclose"):
            await self._authenticator.aclose()
        await self.engine.dispose()
