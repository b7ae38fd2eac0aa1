import argparse
import re

import pytest

from benchmarks.translation_decoding import parse_setting


def test_settings_name_every_decoding_option():
    assert parse_setting("greedy") == ("greedy", {"strategy": "greedy", "num_beams": 1, "no_repeat_ngram_size": 0})
    assert parse_setting("beam4+nr3+ml1.5")[1] == {"strategy": "beam", "num_beams": 4, "no_repeat_ngram_size": 3,
                                                    "max_length_ratio": 1.5, "max_length_offset": 10}
    assert parse_setting("greedy+ml2,5")[1]["max_length_offset"] == 5


@pytest.mark.parametrize("text", ["beam", "greedy+ml0", "greedy+ml-1", "beam4+ml1.5+nr3", "top_k"])
def test_bad_settings_are_named(text):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(text))):
        parse_setting(text)
