"""The one error type for problems a user can fix.

An `AmberError` carries one plain sentence naming the problem and the fix; the
CLI prints it alone, without a traceback. Every other exception is a bug or an
infrastructure failure and keeps its traceback and cause.
"""


class AmberError(Exception):
    """A problem the user can fix, stated as one sentence (problem and fix)."""

    field: str | None = None  # the request's field the sentence is about, where it is one (the launchpad names it)


class NotFound(AmberError):
    """Nothing by that name or id where the user may look; another Workspace's object is reported the same way, so
    the API answers both alike (404)."""


class Forbidden(AmberError):
    """The user is known but their role does not allow this (staff only, operators only): the API's 403."""


class SignInRefused(AmberError):
    """No valid token: the API's 401."""
