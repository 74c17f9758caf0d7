"""Multi-GPU TDP: the launcher's group of torch.distributed worker ranks, the protocol they speak, and
the worker entry script (`worker_main.py`). Tiles go round-robin over the ranks; each model call ends
with one all_reduce. Nothing here starts at import."""
