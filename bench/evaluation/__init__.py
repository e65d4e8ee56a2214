"""Retrieval evaluation on BEIR-format data, run through the live pipeline."""
