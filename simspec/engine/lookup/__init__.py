"""Lookup drafters replayed exactly on real token streams.

A lookup drafter (vLLM's n-gram, prompt lookup decoding, SGLang's n-gram trie, suffix decoding)
proposes from the tokens it has seen, so given a request's prompt and the target's output the
proposal at every position, its length and how much of it a greedy target accepts are known
exactly: no acceptance model is needed. One module per proposer, each as its engine implements
it (the docstrings cite the code read); :mod:`.replay` holds the shared result type.
"""
