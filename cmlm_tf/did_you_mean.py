"""The closest known name for a name a user mistyped ("did you mean"), shared by recipe
names, command-line flags, config keys, experiments and paths. Nothing here imports
TensorFlow: a typo is reported in well under a second.
"""

import difflib
from typing import List, Sequence


def closest(word: str, candidates: Sequence[str]) -> List[str]:
    """The candidates most like `word`, best first; [] when none is close.

    A candidate is close when it is one edit away (`one_edit_apart`: two neighbouring letters
    swapped, one letter added, dropped or changed), which catches typos in short names
    ("rnu" for "run", similarity 0.67), or when its similarity (difflib's ratio) is at least
    0.75 and within 0.05 of the best. A candidate equal to `word` is the only answer."""
    if word in candidates:
        return [word]
    scored = sorted(((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in candidates),
                    reverse=True)
    if not scored:
        return []
    floor = max(0.75, scored[0][0] - 0.05)
    return [c for score, c in scored if score >= floor or one_edit_apart(word, c)]


def one_edit_apart(first: str, second: str) -> bool:
    """Whether `second` is `first` with one edit (Damerau-Levenshtein distance 1): two
    neighbouring characters swapped, or one character inserted, deleted or substituted. Names
    shorter than 3 characters on both sides never count: one edit there is most of the name."""
    if first == second or max(len(first), len(second)) < 3 or abs(len(first) - len(second)) > 1:
        return False
    at = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b),
              min(len(first), len(second)))
    if len(first) < len(second):
        return first[at:] == second[at + 1:]
    if len(first) > len(second):
        return first[at + 1:] == second[at:]
    swapped = first[at + 1:at + 2] + first[at:at + 1] + first[at + 2:]
    return first[at + 1:] == second[at + 1:] or swapped == second[at:]
