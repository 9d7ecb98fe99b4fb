"""Check programs that adapters ship into Task folders as `tests/check.py`.

Each is a stand-alone script for the program check of `benchmarks.static`: it
reads the answer on standard input and the item's data from a JSON file beside
it, exits 0 to accept, and otherwise ends with one sentence on standard error.
They use the standard library only and run with any Python 3.9 or later, since
the host's `python3` runs them, not Amber's environment. Their functions can
be imported too, so an adapter applies the same rules when it writes a Task as
the check does when it reads an answer.
"""
