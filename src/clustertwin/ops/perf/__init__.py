"""Node benchmarks: GEMM, memory, collectives (gloo / NCCL), storage and I/O, and their validation against the twin (``node bench``, ``node validate``)."""
