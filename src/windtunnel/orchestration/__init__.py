"""The orchestration: what trains, evaluates, analyses and writes results.

* :mod:`.stages` — ``train_run``, ``evaluate_run``, ``analyze_run``, ``write_report``: one run's stages;
* :mod:`.main_job` — the main job as one call: its plan from the grid, then the stages, redoing only what is not
  current (``windtunnel run``);
* :mod:`.table` — the architecture × primitive table;
* :mod:`.reproduce` — the cells the claims declare they read, worked and exported to ``results/``;
* :mod:`.executors` — where a plan's cells are worked: the local process pool or a SLURM job array;
* :mod:`.timescales` — Paper II's frame before precision over seeds;
* :mod:`.diversity` — memorisation vs inference: the task-diversity sweep read from its cells;
* :mod:`.compare` — runs side by side.

The top layer below the command line (:mod:`windtunnel.cli`).
"""
