"""Retrieval for the knowledge bank: chunking, embeddings, and the BM25 + HNSW hybrid index."""
