"""GraphQL execution with a fast path for objects whose selected fields are all plain attributes of leaf type.

graphql-core resolves and completes every field of every object on its own (resolve info, argument
values, path, completion): for a page of 100 audit events that is ~1,300 trips through the executor,
most of a request's time. When every field selected on an object is a strawberry "basic" field (a plain
attribute: no resolver, no arguments, no permission or field extension) of scalar or enum type, the
result is just `{key: type.serialize(attribute)}`, which a function compiled once per selection computes.
Anything else, and any value it cannot serialise cleanly (a null for a non-null field, a serialiser error),
goes the ordinary way, so errors keep graphql-core's messages, paths and locations.
"""

from __future__ import annotations

import datetime as dt
import keyword
import operator
from collections.abc import Callable
from typing import Any

from strawberry.extensions.directives import DirectivesExtension, DirectivesExtensionSync
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from graphql import (
    GraphQLBoolean,
    GraphQLID,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLString,
    Undefined,
    is_leaf_type,
)

_BASIC = "_get_basic_result"  # strawberry's resolver of a plain attribute field
_PLAIN = frozenset({str, int, float, bool, dict, list, dt.datetime})  # leaf values that are never awaitable


class _Fallback(Exception):
    pass


def _getter(field_def: Any, resolve: Any) -> Any:
    """How a basic field's value is read: the attribute's name when `getattr(source, name)` is all strawberry would
    do, else a function of the source."""
    field = (field_def.extensions or {}).get("strawberry-definition")
    if field is not None and field.base_resolver is None and field.default_resolver is getattr:
        name = field.python_name
        if name.isidentifier() and not keyword.iskeyword(name):
            return name
        return operator.attrgetter(name)
    return lambda source: resolve(source, None)


# How one value completes: ("leaf", serialize) | ("object", object type, field details) | ("list", item non-null,
# item spec); a plan's fields are (response name, attribute name or source -> value, spec, non-null, own type)
# each, where values of the own type are their own serialisation (a str of String or ID, a bool of Boolean, an int
# of Int within 32 bits).
Spec = tuple[Any, ...]
Field = tuple[str, Any, Spec, bool, type | None]
_OWN_TYPES = {GraphQLString: str, GraphQLID: str, GraphQLBoolean: bool, GraphQLInt: int}
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
# A plan: `(source, complete) -> result dict`, compiled once from its fields (see _compiled_row).
Plan = Callable[[Any, Any], dict[str, Any]]


def _compiled_row(fields: list[Field]) -> Plan:
    """The plan of `fields`: the loop over them unrolled into straight-line code, compiled once.

    Per field: a value of its own type as it is, another plain leaf value through its serialiser (a null or
    Undefined from it means the ordinary path), anything else through `complete(spec, non_null, value)`; the
    result is one dict display. Only our schema's attribute names (identifiers) reach the compiled source; response
    names and everything else come from the namespace by index, so no text of a query does.
    """
    namespace: dict[str, Any] = {"PLAIN": _PLAIN, "Undefined": Undefined, "Fallback": _Fallback}
    lines = ["def row(s, complete):"]
    for i, (name, read, spec, non_null, own) in enumerate(fields):
        namespace.update({f"n{i}": name, f"s{i}": spec, f"b{i}": non_null, f"t{i}": own})
        if isinstance(read, str):
            lines.append(f"    v = s.{read}")
        else:
            namespace[f"g{i}"] = read
            lines.append(f"    v = g{i}(s)")
        if spec[0] != "leaf":
            lines.append(f"    x{i} = complete(s{i}, b{i}, v)")
            continue
        namespace[f"z{i}"] = spec[1]
        lines.append("    k = type(v)")
        branch = "if"
        if own is not None:
            in_range = f" and {_INT_MIN} <= v <= {_INT_MAX}" if own is int else ""
            lines += [f"    if k is t{i}{in_range}:", f"        x{i} = v"]
            branch = "elif"
        lines += [
            f"    {branch} k in PLAIN:",  # the usual case, inline: no await or null to mind
            f"        x{i} = z{i}(v)",
            f"        if x{i} is None or x{i} is Undefined:",
            "            raise Fallback",
            "    else:",
            f"        x{i} = complete(s{i}, b{i}, v)",
        ]
    lines.append("    return {" + ", ".join(f"n{i}: x{i}" for i in range(len(fields))) + "}")
    exec(compile("\n".join(lines), "<fast plan>", "exec"), namespace)  # noqa: S102 - our own fixed template
    row: Plan = namespace["row"]
    return row


# (type, response names, ids of the field nodes, which are not deferred) -> (the nodes, the plan or None)
_SHARED_PLANS: dict[tuple[Any, ...], tuple[tuple[Any, ...], Plan | None]] = {}
_MAX_SHARED_PLANS = 1024


class LeafFastExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's execution context, resolving objects made only of plain fields (leaves, plain objects and lists
    of them, like a connection's edges and nodes) without the per-field machinery (same answer; see the module
    docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # id(grouped field set) -> (the set, kept alive so its id is not reused; its plan or None)
        self._leaf_plans: dict[int, tuple[Any, Plan | None]] = {}
        # (object type, id(field details)) -> (the details, kept alive likewise; the plan of their subfields or None)
        self._object_plans: dict[tuple[Any, int], tuple[Any, Plan | None]] = {}
        # Strawberry always adds its directives extension as middleware: it does nothing for a field without
        # directives (and the fast path takes none). Any other middleware means the ordinary path.
        middlewares = getattr(self.middleware_manager, "middlewares", None) or ()
        self._fast = all(isinstance(m, DirectivesExtension | DirectivesExtensionSync) for m in middlewares)
        settings = getattr(getattr(self.context_value, "app", None), "settings", None)  # the API's (ApiContext.app)
        if settings is not None and not settings.fast_paths:  # RECOVERY_FAST_PATHS=off: graphql-core's own way
            self._fast = False

    def _leaf_plan(self, parent_type: GraphQLObjectType, grouped_field_set: Any) -> Plan | None:
        known = self._leaf_plans.get(id(grouped_field_set))
        if known is not None and known[0] is grouped_field_set:
            return known[1]
        # Across requests: the same selection of a cached document (the same field nodes, none deferred) on the same
        # type has the same plan; the entry keeps its nodes alive, so their ids are not reused while it is cached.
        nodes = tuple(d.node for details in grouped_field_set.values() for d in details)
        shape = (
            parent_type,
            tuple(grouped_field_set),
            tuple(map(id, nodes)),
            tuple(d.defer_usage is None for details in grouped_field_set.values() for d in details),
        )
        shared = _SHARED_PLANS.get(shape)
        if shared is not None and all(a is b for a, b in zip(shared[0], nodes, strict=True)):
            result = shared[1]
        else:
            fields = _plan_of(self.schema, parent_type, grouped_field_set)
            result = _compiled_row(fields) if fields else None
            if len(_SHARED_PLANS) >= _MAX_SHARED_PLANS:
                _SHARED_PLANS.clear()
            _SHARED_PLANS[shape] = (nodes, result)
        self._leaf_plans[id(grouped_field_set)] = (grouped_field_set, result)
        return result

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Any,
        grouped_field_set: Any,
        position_context: Any,
    ) -> Any:
        if self._fast and position_context is None:
            plan = self._leaf_plan(parent_type, grouped_field_set)
            if plan is not None:
                try:
                    return self._execute_plan(plan, source_value)
                except Exception:  # noqa: BLE001 - the ordinary path below reports it properly
                    pass
        return super().execute_fields(parent_type, source_value, path, grouped_field_set, position_context)

    def _execute_plan(self, plan: Plan, source_value: Any) -> dict[str, Any]:
        return plan(source_value, self._complete)

    def _complete(self, spec: Spec, non_null: bool, value: Any) -> Any:
        if not self._present(value, non_null):
            return None
        kind = spec[0]
        if kind == "leaf":
            serialized = spec[1](value)
            if serialized is None or serialized is Undefined:
                raise _Fallback
            return serialized
        if kind == "list":
            if isinstance(value, str | bytes | dict) or not hasattr(value, "__iter__"):
                raise _Fallback
            item_non_null, item_spec = spec[1], spec[2]
            if item_spec[0] == "object":  # a connection's edges: one plan and type check for every item
                plan = self._object_plan(item_spec[1], item_spec[2])
                if plan is None:
                    raise _Fallback
                is_type_of: Any = item_spec[1].is_type_of  # strawberry's ignore the resolve info
                complete, present = self._complete, self._present
                results: list[dict[str, Any] | None] = []
                for item in value:
                    if not present(item, item_non_null):
                        results.append(None)
                    elif is_type_of is not None and is_type_of(item, None) is not True:
                        raise _Fallback
                    else:
                        results.append(plan(item, complete))
                return results
            return [self._complete(item_spec, item_non_null, item) for item in value]
        return self._object_result(spec[1], self._object_plan(spec[1], spec[2]), value)

    def _present(self, value: Any, non_null: bool) -> bool:
        """False for an allowed null; a null where none is allowed, or an awaitable, goes the ordinary way."""
        if value is None:
            if non_null:
                raise _Fallback
            return False
        if self.is_awaitable(value):
            getattr(value, "close", lambda: None)()  # the ordinary path resolves it again
            raise _Fallback
        return True

    def _object_result(self, object_type: GraphQLObjectType, plan: Plan | None, value: Any) -> dict[str, Any]:
        is_type_of: Any = object_type.is_type_of  # strawberry's ignore the resolve info
        if plan is None or (is_type_of is not None and is_type_of(value, None) is not True):
            raise _Fallback
        return plan(value, self._complete)

    def _object_plan(self, object_type: GraphQLObjectType, details: Any) -> Plan | None:
        """The plan of an object's subfields, collected once per execution (every row of a list has the same)."""
        known = self._object_plans.get((object_type, id(details)))
        if known is not None and known[0] is details:
            return known[1]
        grouped, new_defer_usages, _ = self.collect_subfields(object_type, details)
        plan = None if new_defer_usages else self._leaf_plan(object_type, grouped)
        self._object_plans[(object_type, id(details))] = (details, plan)
        return plan


def _plan_of(schema: Any, parent_type: GraphQLObjectType, grouped_field_set: Any) -> list[Field] | None:
    """The fields of a selection's plan on `parent_type`, or None when one of them needs the ordinary path."""
    plan = []
    for response_name, details in grouped_field_set.items():
        node = details[0].node
        field_def = schema.get_field(parent_type, node.name.value)
        if field_def is None or field_def.args or node.arguments or any(d.node.directives for d in details):
            return None
        resolve = field_def.resolve
        if resolve is None or getattr(resolve, "__name__", "") != _BASIC:
            return None
        non_null, spec = _spec(field_def.type, details)
        if spec is None:
            return None
        named = field_def.type.of_type if non_null else field_def.type
        plan.append((response_name, _getter(field_def, resolve), spec, non_null, _OWN_TYPES.get(named)))
    return plan


def _spec(field_type: Any, details: Any) -> tuple[bool, Spec | None]:
    """(non-null, how to complete) for a field type the fast path handles, else (_, None)."""
    non_null = isinstance(field_type, GraphQLNonNull)
    named = field_type.of_type if non_null else field_type
    if is_leaf_type(named):
        return non_null, ("leaf", named.serialize)
    if isinstance(named, GraphQLObjectType):
        if any(d.defer_usage is not None for d in details):
            return non_null, None
        return non_null, ("object", named, details)
    if isinstance(named, GraphQLList):
        item_non_null, item_spec = _spec(named.of_type, details)
        if item_spec is None or item_spec[0] == "list":
            return non_null, None
        return non_null, ("list", item_non_null, item_spec)
    return non_null, None
