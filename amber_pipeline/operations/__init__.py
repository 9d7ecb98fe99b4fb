"""What a user can ask of Amber: operations with typed records in and out.

One contract for both faces that act for a user: the CLI calls an operation
in its own process on the embedded default, or over HTTP when `AMBER_URL`
names a server (`cli/client.py`), and the hosted API (`server`)
serves each operation as a route. Either way the operation runs here, on the
server's side, with the same records on the wire, so a command prints the
same in both modes.
"""
