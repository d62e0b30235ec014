"""What every process shares: settings, the database engine and its session factory."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.db import create_engine, session_factory


@dataclass
class AppContext:
    """Process-wide handles, built once at start-up and closed at shutdown."""

    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]

    @classmethod
    def open(cls, settings: Settings) -> AppContext:
        """Create the engine (no connection is made until first use)."""
        engine = create_engine(settings.database_url)
        return cls(settings=settings, engine=engine, sessions=session_factory(engine))

    async def close(self) -> None:
        """Dispose of the engine's connections."""
        await self.engine.dispose()
