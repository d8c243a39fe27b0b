"""Training: the loop and what it is made of.

* :mod:`.loop` — the training loop, top to bottom (``train``, ``build``);
* :mod:`.stacked` — several same-shaped runs trained as one batched model;
* :mod:`.checkpointing` — the checkpoint-and-stop policy both loops follow;
* :mod:`.streams` — fresh data per step, shards, the curriculum;
* :mod:`.optim` — the schedule, parameter groups and loss.

Above the analyses (:mod:`windtunnel.geometry`, :mod:`windtunnel.routing`, :mod:`windtunnel.llm`),
which read a trained model and never import from here.
"""
