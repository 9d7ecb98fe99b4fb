"""Workspaces and their members, Credits and the Wallet."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, Field

from amber_pipeline.accounts import workspaces
from amber_pipeline.money import wallet
from amber_pipeline.money.amounts import Amount
from amber_pipeline.operations.operation import Acting, operation


class WorkspaceName(BaseModel):
    name: str = Field(description="The Workspace's name: letters, digits, '.', '_' and '-'.")


class Member(BaseModel):
    name: str = Field(description="The Workspace's name.")
    user: str = Field(description="The user to add.")


class Membership(BaseModel):
    workspace: str
    members: int


class Memberships(BaseModel):
    user: str
    workspaces: list[Membership]


class ProviderPolicy(BaseModel):
    providers: list[str] | None = Field(None, description="The Providers its private Benchmarks may be sent to "
                                                          "(absent: leave the policy as it is).")
    any_provider: bool = Field(False, description="Drop the policy: any Provider.")


class Policy(BaseModel):
    workspace: str
    providers: list[str] | None  # None: any Provider


class CreditRequest(BaseModel):
    amount: Amount = Field(description="US dollars as a plain decimal string, e.g. \"100\" or \"12.50\".")
    reason: str = Field("", description="Why the Credit is given (required).")


class Credited(BaseModel):
    workspace: str
    amount: Decimal


class Wallet(BaseModel):
    state: wallet.WalletState
    entries: list[wallet.Entry]


@operation("POST", "/workspaces", where="user")
def workspace_create(acting: Acting, params: WorkspaceName) -> WorkspaceName:
    """Create a Workspace; you become its first member. Its Wallet starts empty."""
    workspaces.create(acting.wh, acting.actor, params.name)
    return params


@operation("POST", "/workspaces/{name}/members", where="user")
def workspace_add_member(acting: Acting, params: Member) -> Member:
    """Add a user to a Workspace you belong to."""
    workspaces.add_member(acting.wh, acting.actor, params.name, params.user)
    return params


@operation("GET", "/workspaces", where="user")
def workspace_list(acting: Acting) -> Memberships:
    """The Workspaces you belong to, with their member counts."""
    return Memberships(user=acting.actor.user, workspaces=[Membership(workspace=w, members=n) for w, n
                                                           in workspaces.list_for(acting.wh, acting.actor.user)])


@operation("GET", "")
def workspace_show(acting: Acting) -> WorkspaceName:
    """The Workspace you act in (with none named, your default), membership checked."""
    return WorkspaceName(name=acting.workspace)


@operation("POST", "/provider-policy")
def workspace_provider_policy(acting: Acting, params: ProviderPolicy) -> Policy:
    """Show or set the Providers the Workspace's private Benchmarks may be sent to."""
    if params.providers or params.any_provider:
        workspaces.set_provider_policy(acting.wh, acting.actor, acting.workspace,
                                       None if params.any_provider else params.providers)
    policy = workspaces.provider_policy(acting.wh, acting.workspace)
    return Policy(workspace=acting.workspace, providers=None if policy is None else sorted(policy))


@operation("POST", "/credits", where="named")
def credit_add(acting: Acting, params: CreditRequest) -> Credited:
    """Add a Credit to a Workspace's Wallet (Amber staff only, with a reason)."""
    value = wallet.add_credit(acting.wh, acting.actor, acting.workspace, params.amount, params.reason)
    return Credited(workspace=acting.workspace, amount=value)


@operation("GET", "/wallet")
def wallet_read(acting: Acting) -> Wallet:
    """The Workspace's Wallet: balance, reserved, available, and its ledger."""
    state, entries = wallet.read(acting.wh, acting.workspace)
    return Wallet(state=state, entries=entries)
