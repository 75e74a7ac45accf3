"""Training data: tables for the MLPs, text for the GPT."""
