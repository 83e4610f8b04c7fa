"""What an XLA-compiled step's program contains: counts of the ops that run serially or
allocate on an accelerator, read from the HLO text of a compiled function. Tests and
benchmarks use it to check that a compiled train step has no `sort` or stray `while`."""

import re
from typing import Dict


def op_census(hlo_text: str) -> Dict[str, int]:
    """Counts, in the text of an HLO module (`experimental_get_compiler_ir(...)(stage="hlo")`),
    the ops that run serially or allocate on an accelerator: `sort`, `while` (a loop XLA
    runs one iteration after another), `rng` and `rng-bit-generator` (random tensors)."""
    return {op: len(re.findall(rf"^\s*(?:ROOT )?%?[\w.\-]+ = .*? {re.escape(op)}\(", hlo_text,
                               re.MULTILINE))
            for op in ("sort", "while", "rng", "rng-bit-generator")}
