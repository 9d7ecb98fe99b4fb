"""Who acts, and where: users and their roles, personal API tokens, Workspaces and their members, the actor of each
action (the CLI's login or a signed-in user), the Dagster UI's launch ids, and the audit log of what they did.
The Wallet, which only a member's action moves, is `money`'s."""
