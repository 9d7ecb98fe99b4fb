"""Model Configurations and where they answer (the provider double for replays)."""
