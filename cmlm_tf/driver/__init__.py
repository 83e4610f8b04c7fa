"""The training driver, a library on Model Garden's trainer and Orbit: `train_lib` (the params
of an experiment, the vocabulary it learns first, and the run), the run directory's lock,
config and log (`run_dir`), its checkpoints found and recovered (`run_checkpoints`), the trainer
that runs each loop in chunks (`chunked_trainer`) with the progress lines between them
(`heartbeat`), the checkpoint manager whose saves defer Ctrl-C (`checkpoint_manager`,
`deferred_interrupt`), and the runner that saves the step reached when training stops early
(`runner`). `python -m cmlm_tf.train` is its command line."""
