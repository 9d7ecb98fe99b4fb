"""Runs launched through the Dagster UI behind sign-in act for the signed-in user, whatever the browser sends.

The gate (`dagster_ui.py`) hands each GraphQL request of an operator here before Dagster sees it. Every run the
request asks Dagster to make (its launch and re-execute mutations) gets the tag `amber/launch`, an id issued for
the signed-in user now (`amber_pipeline/accounts/launches.py`), and the tag `amber/user`, their name, in place of
any tag of those names the browser sent; Amber's ops act for the user the id was issued to. A made-up id names
no launch, and one copied from another run was claimed by that run, so neither acts for anyone.

Tags can be set where a launch's parameters are GraphQL variables, which is how the Dagster UI sends them, in a
POST of JSON. A launch written inline in the query, given a default in the query, or sent any other way
(a GET, a body of `application/graphql`) is refused in one sentence. Subscriptions, the websocket's only
operations, cannot launch anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from graphql import GraphQLError, parse
from graphql.language import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
)

from amber_pipeline.accounts.launches import IDENTITY_TAGS, LAUNCH_TAG, USER_TAG
from amber_pipeline.errors import AmberError

# Dagster's mutations that make runs, and their arguments that hold each run's parameters (dagster_graphql's
# schema/roots/mutation.py). Backfills make runs of partitioned jobs only, and none of those acts for a user.
LAUNCHES: dict[str, tuple[str, ...]] = {
    "launchRun": ("executionParams",),
    "launchPipelineExecution": ("executionParams",),
    "launchMultipleRuns": ("executionParamsList",),
    "launchRunReexecution": ("executionParams", "reexecutionParams"),
    "launchPipelineReexecution": ("executionParams", "reexecutionParams"),
}
AS_VARIABLES = ("A launch from the Dagster UI behind Amber's sign-in takes its parameters as GraphQL variables, "
                "without defaults, in a POST of JSON (as the Dagster UI sends them): send them that way.")


def launches_in(query: str) -> bool:
    """Whether a GraphQL document asks for a run to be made (one Dagster cannot parse asks for nothing)."""
    document = _parsed(query)
    return document is not None and any(True for _ in _launch_fields(document))


def stamp(body: dict[str, Any], user: str, issue: Callable[[], str]) -> dict[str, Any]:
    """The body of a GraphQL POST with every run it launches tagged for `user`, each with a launch id from
    `issue`; refused in one sentence when a launch's parameters are not variables."""
    query = body.get("query")
    document = _parsed(query) if isinstance(query, str) else None
    if document is None:
        return body  # Dagster answers it with its own error: nothing is launched
    kinds: dict[str, str] = {}  # variable -> the argument it is given to
    for field in _launch_fields(document):
        for argument in field.arguments:
            if argument.name.value in LAUNCHES[field.name.value]:
                if not isinstance(argument.value, VariableNode):
                    raise AmberError(AS_VARIABLES)
                kinds[argument.value.name.value] = argument.name.value
    if not kinds:
        return body
    if any(d.default_value is not None and d.variable.name.value in kinds
           for op in document.definitions if isinstance(op, OperationDefinitionNode)
           for d in op.variable_definitions):
        raise AmberError(AS_VARIABLES)
    variables = body.get("variables")
    if isinstance(variables, str):
        try:
            variables = json.loads(variables)
        except json.JSONDecodeError:
            return body  # Dagster refuses variables that are not JSON
    if variables is None:
        variables = {}
    if not isinstance(variables, dict):
        return body  # nor does it take any but an object
    tagged = dict(variables)
    for name, kind in kinds.items():
        value = tagged.get(name)
        if kind == "executionParamsList" and isinstance(value, list):
            tagged[name] = [_with_tags(v, "executionParams", user, issue) for v in value]
        elif value is not None:
            tagged[name] = _with_tags(value, kind, user, issue)
    return {**body, "variables": tagged}


def _with_tags(params: Any, kind: str, user: str, issue: Callable[[], str]) -> Any:
    """One run's parameters with its identity tags made here: in its execution metadata's tags, or in a
    re-execution's extra tags (which Dagster puts over the parent run's)."""
    if not isinstance(params, dict):
        return params  # not parameters at all: Dagster refuses them
    ours = [{"key": LAUNCH_TAG, "value": issue()}, {"key": USER_TAG, "value": user}]
    if kind == "reexecutionParams":
        return {**params, "extraTags": _kept(params.get("extraTags")) + ours}
    metadata = params.get("executionMetadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    return {**params, "executionMetadata": {**metadata, "tags": _kept(metadata.get("tags")) + ours}}


def _kept(tags: Any) -> list[Any]:
    """The tags the browser sent, less those only Amber sets."""
    if not isinstance(tags, list):
        return []
    return [t for t in tags if not (isinstance(t, dict) and t.get("key") in IDENTITY_TAGS)]


def _parsed(query: str) -> DocumentNode | None:
    try:
        return parse(query)
    except GraphQLError:
        return None


def _launch_fields(document: DocumentNode) -> Iterator[FieldNode]:
    """Every field of the document (its operations' and its fragments') that is a mutation making runs."""
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode | FragmentDefinitionNode):
            yield from _fields(definition.selection_set)


def _fields(selections: SelectionSetNode | None) -> Iterator[FieldNode]:
    for selection in selections.selections if selections is not None else ():
        if isinstance(selection, FieldNode):
            if selection.name.value in LAUNCHES:
                yield selection
            yield from _fields(selection.selection_set)
        elif isinstance(selection, InlineFragmentNode):
            yield from _fields(selection.selection_set)
