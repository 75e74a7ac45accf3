"""Native training: the loop, data-parallel ranks, checkpoints, run directories."""
