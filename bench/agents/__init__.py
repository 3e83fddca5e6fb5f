"""Agent workloads: multi-turn conversations' generation and update, GiGPO's cost, the agent endpoint."""
