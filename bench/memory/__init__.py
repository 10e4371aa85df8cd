"""Peak memory and wall time of whole `hetriever` processes."""
