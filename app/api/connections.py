"""Relay connections built from app.infra.pagination keyset pages, with capped page sizes."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from functools import wraps
from typing import Any, Generic, TypeVar

import strawberry
from strawberry.dataloader import DataLoader

from app.api.errors import bad_input
from app.domain.edge.cursor import CursorError, encode_cursor
from app.infra.db import Sessions
from app.infra.pagination import Page, PageArgumentError, PageRequest

T = TypeVar("T")
R = TypeVar("R")

# Page sizes: (default, cap). The REST endpoints use the same caps.
TOP_LEVEL = (50, 250)
AUDIT = (50, 100)
NESTED = (20, 100)


@strawberry.type(description="Where a page sits in its list (Relay).")
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type(description="One row of a page with its opaque cursor.")
class Edge(Generic[T]):
    cursor: str
    node: T


@strawberry.type(description="A page of a list: pass pageInfo.endCursor as `after` for the next one.")
class Connection(Generic[T]):
    edges: list[Edge[T]]
    nodes: list[T]
    page_info: PageInfo
    total_count: int | None = strawberry.field(
        default=None, description="Rows in the whole list; null where counting is not cheap (e.g. audit events)."
    )


def page_request(
    *, first: int | None, after: str | None, last: int | None, before: str | None, sizes: tuple[int, int]
) -> PageRequest:
    """Validated, capped Relay arguments; the error names the cap."""
    try:
        return PageRequest.build(
            first=first, after=after, last=last, before=before, default_size=sizes[0], max_size=sizes[1]
        )
    except PageArgumentError as exc:
        raise bad_input(str(exc)) from None


RELAY_ARGUMENTS = {"first": "int | None", "after": "str | None", "last": "int | None", "before": "str | None"}


def paged(
    sizes: tuple[int, int], *, root: bool = False
) -> Callable[[Callable[..., Awaitable[Connection[T]]]], Callable[..., Awaitable[Connection[T]]]]:
    """A list resolver taking `request: PageRequest` becomes one taking Relay's first/after/last/before in its place.

    The schema sees the four arguments last, as they were spelled by hand; a `root` field checks the caller
    before the arguments, as every root field does.
    """

    def decorate(read: Callable[..., Awaitable[Connection[T]]]) -> Callable[..., Awaitable[Connection[T]]]:
        @wraps(read)
        async def resolver(
            *args: Any,
            info: strawberry.Info,
            first: int | None = None,
            after: str | None = None,
            last: int | None = None,
            before: str | None = None,
            **kwargs: Any,
        ) -> Connection[T]:
            if root:
                info.context.viewer()
            request = page_request(first=first, after=after, last=last, before=before, sizes=sizes)
            return await read(*args, info=info, request=request, **kwargs)

        own = inspect.signature(read)
        relay = [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=annotation)
            for name, annotation in RELAY_ARGUMENTS.items()
        ]
        kept = [parameter for parameter in own.parameters.values() if parameter.name != "request"]
        resolver.__signature__ = own.replace(parameters=kept + relay)  # type: ignore[attr-defined]
        annotations = {name: hint for name, hint in read.__annotations__.items() if name != "request"}
        returns = annotations.pop("return")
        resolver.__annotations__ = {**annotations, **RELAY_ARGUMENTS, "return": returns}
        return resolver

    return decorate


def to_connection(page: Page[R], wrap: Callable[[R], T], *, total_count: int | None = None) -> Connection[T]:
    """The Relay connection of a keyset page, each row wrapped as its GraphQL type."""
    nodes = [wrap(row) for row in page.items]
    return Connection(
        edges=[Edge(cursor=cursor, node=node) for cursor, node in zip(page.cursors, nodes, strict=True)],
        nodes=nodes,
        page_info=PageInfo(
            has_next_page=page.has_next_page,
            has_previous_page=page.has_previous_page,
            start_cursor=page.start_cursor,
            end_cursor=page.end_cursor,
        ),
        total_count=total_count,
    )


def first_page(rows: Sequence[R], *, size: int, kind: str, key_of: Callable[[R], Sequence[Any]]) -> Page[R]:
    """A first page from rows loaded in a batch (size + 1 of them), with the cursors paginate() would issue."""
    items = list(rows[:size])
    return Page(
        items=items,
        cursors=[encode_cursor(kind, list(key_of(row))) for row in items],
        has_next_page=len(rows) > size,
        has_previous_page=False,
    )


def is_plain_first_page(request: PageRequest) -> bool:
    """True when the request is a first page (no cursors, counting forward): such pages can be batched."""
    return request.first is not None and not request.after and not request.before


def cursor_problem(exc: CursorError) -> Exception:
    return bad_input(f"{exc} (cursors come from pageInfo/edges of the same list)")


async def read_connection(
    sessions: Sessions,
    request: PageRequest,
    fetch: Callable[..., Awaitable[Page[R]]],
    wrap: Callable[[R], T],
    *,
    total_count: int | None = None,
) -> Connection[T]:
    """The connection of one page of a service list, `fetch(session, page=...)`, read in a session of its own."""
    async with sessions() as session:
        try:
            page = await fetch(session, page=request)
        except CursorError as exc:
            raise cursor_problem(exc) from None
    return to_connection(page, wrap, total_count=total_count)


async def nested_connection(
    sessions: Sessions,
    request: PageRequest,
    *,
    parent_id: int,
    batch: DataLoader[tuple[int, int], list[R]],
    kind: str,
    key_of: Callable[[R], Sequence[Any]],
    fetch: Callable[..., Awaitable[Page[R]]],
    wrap: Callable[[R], T],
    total_count: int | None = None,
) -> Connection[T]:
    """A parent's child list: a plain first page loads through the batched DataLoader, other pages through `fetch`.

    `kind` and `key_of` must be those the service's paginate() uses, so both paths issue the same cursors.
    """
    if not is_plain_first_page(request):
        return await read_connection(sessions, request, fetch, wrap, total_count=total_count)
    assert request.first is not None
    rows = await batch.load((parent_id, request.first + 1))
    page = first_page(rows, size=request.first, kind=kind, key_of=key_of)
    return to_connection(page, wrap, total_count=total_count)
