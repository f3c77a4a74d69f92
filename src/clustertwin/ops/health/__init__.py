"""Node checks: drivers, CUDA/NCCL compatibility, GPU health, fabric, container runtime, host settings, packet loss (``node check``)."""
