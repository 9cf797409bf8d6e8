"""Tensor parallelism over torch.distributed: the group, the collective ops, the worker set."""
