"""The one error type for problems a user can fix.

An `AmberError` carries one plain sentence naming the problem and the fix; the
CLI prints it alone, without a traceback. Every other exception is a bug or an
infrastructure failure and keeps its traceback and cause.
"""


class AmberError(Exception):
    """A problem the user can fix, stated as one sentence (problem and fix)."""
