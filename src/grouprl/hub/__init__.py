"""Hub revisions: checkpoints pushed to branches in the background."""
