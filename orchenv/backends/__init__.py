"""Agent backends: simulated, replay, live servers, local models."""
