"""grouprl vs TRL's GRPOTrainer on the same work (bench/README.md)."""
