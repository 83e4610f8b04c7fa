#!/usr/bin/env bash
# A cased multilingual WordPiece vocabulary with language smoothing 0.3 (LaBSE §3.1 recipe:
# one --input per language, so each language's word counts are re-weighted by q_l / p_l with
# q_l ∝ p_l^0.3), from one file per language of the UDHR sample, then the command that
# trains with it.
#
#   bash configs/build_multilingual_vocab.sh OUT_DIR [UDHR_DIR] [LANGUAGES]
#
# UDHR_DIR: one file per language, one paragraph per line (default: ../shared/data/udhr
# beside the repository);
# LANGUAGES: file names without .txt (default: eng spa fra deu_1996 rus arb cmn_hans hin).
# Environment: PYTHON (default python), VOCAB_SIZE (default 8000; a corpus this small gives
# fewer: the learner keeps pieces seen at least 10 times).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: bash configs/build_multilingual_vocab.sh OUT_DIR [UDHR_DIR] [LANGUAGES]" >&2
  exit 2
fi
OUT_DIR=$(realpath -m "$1")
UDHR_DIR=$(realpath -m "${2:-$(dirname "$0")/../../shared/data/udhr}")
cd "$(dirname "$0")/.."
read -r -a LANGUAGES <<< "${3:-eng spa fra deu_1996 rus arb cmn_hans hin}"
PYTHON=${PYTHON:-python}

inputs=()
for language in "${LANGUAGES[@]}"; do
  inputs+=(--input "$UDHR_DIR/$language.txt")
done
mkdir -p "$OUT_DIR"
# Cased: no --lower_case, so the model's tokenizer must use lower_case: false as well.
"$PYTHON" -m cmlm_tf.build_vocab "${inputs[@]}" --vocab_size "${VOCAB_SIZE:-8000}" \
  --smoothing_exponent 0.3 --output "$OUT_DIR/vocab.txt" --quiet
size=$(wc -l < "$OUT_DIR/vocab.txt")
echo "Wrote $OUT_DIR/vocab.txt ($size tokens). Train with it, e.g.:"
echo "  python -m cmlm_tf.train --experiment=cmlm_tf/mlm_tlm --config_file=configs/mlm_tlm_tiny.yaml --mode=train --model_dir=runs/mlm_tlm_udhr --params_override=task.model.tokenizer.vocab_file=$OUT_DIR/vocab.txt,task.model.tokenizer.lower_case=false,task.model.encoder.vocab_size=$size"
