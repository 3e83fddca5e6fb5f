"""The GPU check and its probes, for a lent GPU machine (bench/README.md)."""
