"""Paper II (arXiv 2512.22473): how cross-entropy sculpts attention.

* :mod:`.law` — the routing law ``∂L/∂s_ij = α_ij (b_ij − E_α[b])`` and the responsibility-weighted
  value update ``∂L/∂v_j = Σ_i α_ij u_i``, computed for any head and checked against autograd;
* :mod:`.em` — "EM-like" training (a larger step on the values) against SGD on the sticky chain,
  with the control that matches the size of each step, and true alternation.
"""

from .law import (HeadGradients, check_all_heads, head_gradients, layer_gradients, score_gradients, scored_cross_entropy,
                  value_gradients)

__all__ = ["HeadGradients", "check_all_heads", "head_gradients", "layer_gradients", "score_gradients", "scored_cross_entropy",
           "value_gradients"]
