"""Who acts where, and the money: identity, Workspaces, the Wallet ledger and prices."""
