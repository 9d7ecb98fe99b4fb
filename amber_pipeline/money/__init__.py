"""The money: the Wallet's ledger, amounts as users type them, and prices."""
