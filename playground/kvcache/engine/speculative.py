"""Speculative decoding by prompt lookup (vLLM's "ngram" drafter), greedy sequences only.

Decoding runs the whole model for one token per sequence and step, while the weights it reads
could serve several tokens at once. A drafter guesses the next k tokens cheaply; one step runs the
model over the sequence's last token and the k guesses (positions p .. p + k, causal, as a chunk
of prefill), and the logits at each position say what plain decoding would have produced there:

    propose:  the last n tokens (n = prompt_lookup_max .. 1) found earlier in the sequence ->
              the k tokens that followed that earlier occurrence are the draft d_1 .. d_k
    verify:   greedy_i = argmax(logits at position p + i), i = 0 .. k
    accept:   d_1 .. d_a, where a is the first i with d_{i+1} != greedy_i (all k if none),
              then greedy_a: the token plain decoding would have produced next

So every step still yields at least one token, the tokens are exactly greedy decoding's, and
a step that accepts a drafts yields a + 1 tokens for the price of one step over k + 1 positions.
Acceptance pays where text repeats itself (code, quotations, a model looping); the price is the
extra positions: nothing when the step is bound by reading the weights (small batches), a
proportional cost once the step computes (large batches), which is where it stops paying.

The KV of rejected drafts stays in slots the sequence keeps beyond its length: the next step's
tokens overwrite it, and attention reads only up to the sequence's length (scheduler.py).
Sampled sequences (temperature > 0) decode one token a step: exact rejection sampling would need
the drafter's probabilities, which a lookup has none of.
"""


def propose_ngram(tokens: list[int], max_n: int, k: int, min_n: int = 1) -> list[int]:
    """Up to `k` draft tokens: what followed the latest earlier occurrence of the sequence's last
    n tokens, trying the longest n first (max_n down to min_n); [] if none recurs."""
    if k <= 0:
        return []
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = tokens[length - n :]
        for start in range(length - n - 1, -1, -1):  # the latest earlier occurrence first
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []


def accept_greedy(draft: list[int], greedy: list[int]) -> list[int]:
    """The tokens a verification step yields: the draft's prefix that greedy decoding agrees with,
    then greedy decoding's next token. `greedy[i]` is the argmax at the i-th position (len(draft) + 1)."""
    accepted = []
    for d, g in zip(draft, greedy, strict=False):
        if d != g:
            break
        accepted.append(d)
    return [*accepted, greedy[len(accepted)]]
