"""Limits on what one GraphQL operation may ask for: depth, tokens, aliases and a list-size cost."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strawberry.extensions import (
    AddValidationRules,
    MaxTokensLimiter,
    SchemaExtension,
    max_aliases,
    query_depth_limiter,
)

from app.api.connections import TOP_LEVEL
from app.api.errors import LIMIT_EXCEEDED
from graphql import (
    FieldNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    VariableNode,
    get_named_type,
    is_interface_type,
    is_object_type,
)

MAX_DEPTH = 10
MAX_TOKENS = 5000
MAX_ALIASES = 30
# Upper bound of fields one operation may resolve: each field counts once per object above it (page sizes multiply).
MAX_COST = 100_000
MAX_SUBSCRIPTIONS_PER_CONNECTION = 20


class QueryCostLimiter(SchemaExtension):
    """Refuses operations whose page sizes multiply past MAX_COST (e.g. 250 workflows x 100 jobs x 100 attempts)."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if document is not None and not context.pre_execution_errors:  # [] = validated before (a cached document)
            try:
                cost = operation_cost(context.schema._schema, document, context.operation_name, context.variables or {})
            except _Unknown:
                cost = 0  # validation will report what is wrong with the document
            if cost > MAX_COST:
                context.pre_execution_errors = [
                    GraphQLError(
                        f"query cost limit exceeded: this operation may resolve up to {cost} fields, "
                        f"the limit is {MAX_COST} "
                        "(ask for smaller pages with first/last, or fewer nested lists)",
                        extensions={"code": LIMIT_EXCEEDED, "limit": "cost", "cost": cost, "maxCost": MAX_COST},
                    )
                ]
        yield


class _Unknown(Exception):
    pass


def operation_cost(schema: GraphQLSchema, document: Any, operation_name: str | None, variables: dict[str, Any]) -> int:
    """How many fields an operation may resolve at most: each field counts the product of the page sizes above it."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    fragments = {d.name.value: d for d in document.definitions if d.kind == "fragment_definition"}
    if operation_name:
        operations = [o for o in operations if o.name and o.name.value == operation_name]
    if len(operations) != 1:
        raise _Unknown
    operation = operations[0]
    root = {
        OperationType.QUERY: schema.query_type,
        OperationType.MUTATION: schema.mutation_type,
        OperationType.SUBSCRIPTION: schema.subscription_type,
    }[operation.operation]
    if root is None:
        raise _Unknown

    def size(field: FieldNode, field_def: Any) -> int:
        if "first" not in field_def.args and "last" not in field_def.args:
            return 1
        for argument in field.arguments or ():
            if argument.name.value in ("first", "last"):
                value = argument.value
                if isinstance(value, IntValueNode):
                    return max(int(value.value), 0)
                if isinstance(value, VariableNode):
                    given = variables.get(value.name.value)
                    if isinstance(given, int):
                        return max(given, 0)
        # Not given: the server's default page size (it is never larger than this).
        return TOP_LEVEL[0]

    def walk(selection_set: SelectionSetNode | None, parent: Any, multiplier: int, seen: frozenset[str]) -> int:
        if selection_set is None:
            return 0
        total = 0
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                name = selection.name.value
                if name.startswith("__"):
                    continue
                if not (is_object_type(parent) or is_interface_type(parent)) or name not in parent.fields:
                    raise _Unknown
                field_def = parent.fields[name]
                count = multiplier * size(selection, field_def)
                total += count + walk(selection.selection_set, get_named_type(field_def.type), count, seen)
            elif isinstance(selection, InlineFragmentNode):
                target = schema.get_type(selection.type_condition.name.value) if selection.type_condition else parent
                total += walk(selection.selection_set, target, multiplier, seen)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                fragment = fragments.get(name)
                if fragment is None or name in seen:
                    raise _Unknown
                target = schema.get_type(fragment.type_condition.name.value)
                total += walk(fragment.selection_set, target, multiplier, seen | {name})
        return total

    assert isinstance(root, GraphQLObjectType)
    return walk(operation.selection_set, root, 1, frozenset())


def limit_extensions() -> list[Any]:
    """The schema extensions: error masking, spec validation first, then the limits (their errors name the limit)."""
    from app.api.masking import MaskUnexpectedErrors, SpecValidationFirst

    # strawberry's QueryDepthLimiter and MaxAliasesLimiter, with their rule classes built once, not per request
    depth_and_aliases: list[Any] = [
        query_depth_limiter.create_validator(MAX_DEPTH, None),
        max_aliases.create_validator(MAX_ALIASES),
    ]
    return [
        MaskUnexpectedErrors,
        SpecValidationFirst,
        lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
        lambda: AddValidationRules(depth_and_aliases),
        QueryCostLimiter,
    ]
