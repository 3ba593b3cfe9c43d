import pytest

from wordstats import average_length, top_words, words


def test_words_are_lower_case():
    assert words("The cat, the HAT.") == ["the", "cat", "the", "hat"]


def test_top_words_most_common_first():
    assert top_words("a b a c a b", 2) == [("a", 3), ("b", 2)]


def test_top_words_ties_in_order_of_appearance():
    assert top_words("x y z y x", 3) == [("x", 2), ("y", 2), ("z", 1)]


@pytest.mark.parametrize("text,want", [("", 0), ("ab abcd", 3), ("I", 1)])
def test_average_length(text, want):
    assert average_length(text) == want
