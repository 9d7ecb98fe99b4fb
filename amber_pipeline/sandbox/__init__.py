"""The Docker engine and Amber's sandbox environment for Harbor's Trials."""
