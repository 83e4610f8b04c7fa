#!/usr/bin/env bash
# The LaBSE path end to end, tiny: MLM + TLM pre-training in three progressive-stacking
# stages (1 -> 2 -> 4 layers, each stage initialised from the previous one with
# task.init_stack_from), then translation-ranking fine-tuning (cmlm_tf/bitext) warm-started
# from the last stage, then the export. Minutes on 2 CPU cores with the defaults.
#
#   bash configs/labse_tiny.sh WORK_DIR [TEXT_FILES] [BITEXT_TSV]
#
# TEXT_FILES: monolingual text for MLM (comma-separated files or globs; default: the bundled
# novel); BITEXT_TSV: source<TAB>target pairs for TLM and fine-tuning (default: the bundled
# English-Spanish Bible sample; validation then reads the bundled held-out files, given files
# validate on themselves). Relative TEXT_FILES and BITEXT_TSV are read from the
# repository root (the runs start there); WORK_DIR is relative to the current directory. Leaves WORK_DIR/stage{1,2,3} (pre-training runs),
# WORK_DIR/bitext (fine-tuning run) and WORK_DIR/export (load with cmlm_tf.load).
# Environment: PYTHON (default python), STAGE_STEPS (default "150 150 150"), BITEXT_STEPS
# (default 300), EXTRA_OVERRIDES (appended to every run's --params_override).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: bash configs/labse_tiny.sh WORK_DIR [TEXT_FILES] [BITEXT_TSV]" >&2
  exit 2
fi
WORK_DIR=$(realpath -m "$1")
TEXT_FILES=${2:-cmlm_tf/data/corpus/persuasion.txt}
BITEXT_TSV=${3:-cmlm_tf/data/corpus/bible_en_es.tsv}
# Validation reads the bundled held-out files with the bundled data, else the given files.
VALID_TEXT=${2:-cmlm_tf/data/corpus/persuasion_heldout.txt}
VALID_BITEXT=${3:-cmlm_tf/data/corpus/bible_en_es_heldout.tsv}
PYTHON=${PYTHON:-python}
read -r -a STEPS <<< "${STAGE_STEPS:-150 150 150}"
BITEXT_STEPS=${BITEXT_STEPS:-300}
EXTRA=${EXTRA_OVERRIDES:+,$EXTRA_OVERRIDES}
LAYERS=(1 2 4)
cd "$(dirname "$0")/.."

schedule() {  # steps -> trainer overrides: linear warm-up over 10 %, decay to 0 at the end
  local warmup=$(( $1 / 10 > 0 ? $1 / 10 : 1 ))
  echo "trainer.train_steps=$1,trainer.checkpoint_interval=$1,trainer.validation_interval=$1,trainer.optimizer_config.learning_rate.polynomial.decay_steps=$1,trainer.optimizer_config.warmup.linear.warmup_steps=$warmup"
}

previous=""
for stage in 0 1 2; do
  run="$WORK_DIR/stage$((stage + 1))"
  stack=${previous:+,task.init_stack_from=$previous}
  "$PYTHON" -m cmlm_tf.train --experiment=cmlm_tf/mlm_tlm --mode=train \
    --config_file=configs/mlm_tlm_tiny.yaml --model_dir="$run" \
    --params_override="task.model.encoder.num_layers=${LAYERS[$stage]},task.train_data.input_path=$TEXT_FILES,task.validation_data.input_path=$VALID_TEXT,task.validation_data.bitext_input_path=$VALID_BITEXT,task.bitext_data.input_path=$BITEXT_TSV,$(schedule "${STEPS[$stage]}")$stack$EXTRA"
  previous=$run
done

"$PYTHON" -m cmlm_tf.train --experiment=cmlm_tf/bitext --mode=train \
  --config_file=configs/bitext_tiny.yaml --model_dir="$WORK_DIR/bitext" \
  --params_override="task.model.encoder.num_layers=${LAYERS[2]},task.init_checkpoint=$previous,task.train_data.input_path=$BITEXT_TSV,task.validation_data.input_path=$VALID_BITEXT,$(schedule "$BITEXT_STEPS")$EXTRA"

"$PYTHON" -m export.export_tfhub --model_dir="$WORK_DIR/bitext" --export_dir="$WORK_DIR/export" \
  --overwrite
echo "Exported to $WORK_DIR/export"
