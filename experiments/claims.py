"""The claims and their arms: which runs of the existing experiments test which sentence.

A claim is a sentence from one of the papers, a set of arms (each one or more training stages
of a registered experiment, composed from the recipes in `configs/` and
`experiments/recipes/`), the evaluations every arm's export gets, and the comparisons whose
paired differences decide the verdict. Step counts are multiples of the claim's `steps`
(`--steps` on the command line), so a sweep keeps its ratios when the claim is shortened.

Placeholders in override values, filled by the runner: `{data}` (the prepared data folder),
`{shared}` (the public data sets), `{minilm}` (the converted all-MiniLM-L6-v2), `{init}` (the
seed's shared random encoder), `{previous}` (the arm's previous stage), `{seed}`, and
`{best_queue_size}` (the queue size of the best `queue_*` arm, resolved after those finish).

The claims are defined in `retrieval_claims.py` and `pretraining_claims.py`, their parts in
`claim_types.py`.
"""

from typing import Dict

from experiments.claim_types import Claim
from experiments.pretraining_claims import BGT, CMLM_VS_MLM, STACKING, STRATEGIES
from experiments.retrieval_claims import MARGIN, NEGATIVES, PCR, QUEUE

CLAIMS: Dict[str, Claim] = {claim.name: claim for claim in
                            (MARGIN, NEGATIVES, QUEUE, CMLM_VS_MLM, STRATEGIES, PCR,
                             STACKING, BGT)}

# Claims of the issue with no runner entry, and why (shown by --list and in the report).
NOT_RUN: Dict[str, str] = {}
