"""Training mechanics shared by every task: how a step turns losses into an update.

- `steps`: the train and validation steps (one code path: a step whose in-batch ranking runs
  in chunks is the general case, the ordinary step the case of one chunk) and
  `compile_steps`, which compiles them with XLA (`runtime.enable_xla`);
- `gradient_cache`: the cached-gradient computation behind chunked ranking (GradCache);
- `seeded_dropout`: dropout whose masks a second pass over the same chunk can replay;
- `recompute`: attention cores and feed-forward activations that recompute their largest
  intermediates in the backward pass;
- `op_census`: what an XLA-compiled step's program contains (the serial and random ops of
  its HLO text), for tests and benchmarks.

The all-gather behind losses with global-batch negatives is `cmlm_tf.distributed`, below
`losses/` and `modeling/`.

Tasks (`cmlm_tf.tasks`) say what to compute; this package says how one step updates the
weights from it. Nothing here knows an objective.
"""
