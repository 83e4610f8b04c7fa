"""The closest known name for a name a user mistyped ("did you mean"), shared by recipe
names, command-line flags and config keys. Nothing here imports TensorFlow: a typo is
reported in well under a second.
"""

from typing import List, Sequence


def closest(word: str, candidates: Sequence[str]) -> List[str]:
    """The candidates most like `word` (similarity at least 0.75, within 0.05 of the best),
    best first; [] when none is close."""
    import difflib

    scored = sorted(((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in candidates),
                    reverse=True)
    if not scored or scored[0][0] < 0.75:
        return []
    return [c for score, c in scored if score >= max(0.75, scored[0][0] - 0.05)]
