"""Embedding throughput: batch sizes, fp32 against int8, batches side by side, Dask workers."""
