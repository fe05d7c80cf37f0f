"""One thread per fleet process (a worker, the memory host, a suite pool's actor)."""
from __future__ import annotations


def one_thread() -> None:
    """One torch and one FAISS thread per worker: with more, N workers on N cores oversubscribe
    (stack notes: 4 actors at 2 threads each were 10x slower per sample). Call after the imports:
    torch and FAISS size their pools when first imported."""
    import torch
    torch.set_num_threads(1)
    try:
        import faiss
        faiss.omp_set_num_threads(1)
    except ImportError:
        pass
