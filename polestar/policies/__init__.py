"""Commit policies (which masked positions take their proposed token this step) and the proposal step.

Glossary (LLaDA, Fast-dLLM, Polestar papers):
- canvas: prompt + `gen_length` positions, initialised to the mask token.
- block: B consecutive generated positions decoded together (semi-autoregressive blocks).
- step: one model forward while a block has masks. NFE counts every forward.
- proposal: the token a masked position would take now (argmax, or Gumbel-max at temperature > 0);
  confidence: the clean softmax probability of that token.
- commit: writing the proposal into the canvas for good (LLaDA's "unmask"; the rest stay "remasked").
A policy never calls the model and never writes the canvas: it returns a boolean commit mask.
"""
