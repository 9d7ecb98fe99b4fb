"""Who is looking, and the one way a page reads: an operation run for them in the Workspace its URL names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amber_pipeline.accounts import identity, workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.operations.operation import acting, in_workspace
from amber_pipeline.warehouse.catalog import Warehouse


@dataclass(frozen=True)
class Viewer:
    """The user a page is shown to: signed in on a hosted Amber, the local user on the embedded default (`local`),
    for whom the CLI's rules hold (the local login is staff)."""

    wh: Warehouse
    user: str
    local: bool
    staff: bool  # may open the Dagster UI (the local user is staff)
    csrf: str  # the token every form of this viewer's pages carries back (`webapp._same_site`)
    reads: bool = True  # the page only reads (a GET): nothing is made for it, not even a first default Workspace

    def run(self, name: str, workspace: str, **fields: Any) -> Any:
        """Operation `name` for this viewer in `workspace`, as the API would run it: membership checked, a read
        changing nothing. A Workspace they are not a member of reads as missing (404), like the API's."""
        op = OPERATIONS[name]
        if not self.local:
            identity.SIGNED_IN.set(self.user)  # this request's context only (a page runs in a thread of its own)
        actor = Actor(self.user, None if workspace == DEFAULT_WORKSPACE else workspace)
        try:
            where = (in_workspace(self.wh, actor, reads=self.reads) if op.where == "acting"
                     else acting(self.wh, actor, op))
        except AmberError as e:
            raise NotFound(f"No Workspace {workspace!r} among yours: pick one of yours.") from e
        return op.run(where, op.params.model_validate(fields))

    def workspaces(self) -> list[str]:
        """The Workspaces this viewer may pick from, their default first even before it is made."""
        names = [name for name, _members in workspaces.list_for(self.wh, self.user)]
        if DEFAULT_WORKSPACE not in names:
            try:
                workspaces.acting_workspace(self.wh, Actor(self.user, None), make_default=False)
                names.insert(0, DEFAULT_WORKSPACE)
            except AmberError:
                pass
        return names
