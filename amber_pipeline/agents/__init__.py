"""The Agents Amber runs and their Agent Versions."""
