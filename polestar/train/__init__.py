"""Training the embedded model: tokenizer, batches, LLaDA's SFT objective, checkpoint export."""
