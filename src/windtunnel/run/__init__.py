"""A run: what it is and where it lives, below everything that trains or reads one.

* :mod:`.config` — ``TrainConfig``: the fields that rebuild a run's task, model and optimiser
  (``config.json``), validated when made; the device a run trains on;
* :mod:`.grid` — the experiment grid: every experiment, its quick/paper recipes, the table's
  columns and rows, and the cells that turn into ``TrainConfig`` fields;
* :mod:`.runs` — ``RunDir``: the one owner of a run folder's files;
* :mod:`.checkpoint` — crash-safe safetensors checkpoints;
* :mod:`.trackers` — TensorBoard, Weights & Biases and MLflow mirrors of ``metrics.jsonl``;
* :mod:`.locks` — a cell's claim beside its run folder, broken only when its holder is gone.

Nothing here trains, evaluates or analyses: the analyses read a run through this package, the
training loop (:mod:`windtunnel.training`) writes one.
"""
