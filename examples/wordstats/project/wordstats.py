"""Word statistics for short texts."""

import re
from collections import Counter

WORD = re.compile(r"[a-z']+")


def words(text):
    """The words of text, lower case, in order."""
    return WORD.findall(text.lower())


def top_words(text, n):
    """The n most common words of text with their counts, most common first;
    words as common as each other in the order they first appear."""
    counts = Counter(words(text))
    return sorted(counts.items(), key=lambda kv: kv[1])[:n]


def average_length(text):
    """The mean length of the words of text; 0 for a text without words."""
    ws = words(text)
    if not ws:
        return 0
    return sum(len(w) for w in ws) / len(ws)
