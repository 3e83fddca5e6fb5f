"""Rollout throughput: async vs sync where latency is real, slow environments over workers, the sandbox."""
