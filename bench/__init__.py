"""grouprl's benchmarks, one folder per question they answer (bench/README.md): run each from the repository's
root as a module, ``python -m bench.<folder>.<script> ...``, so they import each other as a package."""
