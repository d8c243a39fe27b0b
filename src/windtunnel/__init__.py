"""windtunnel: does a sequence model do exact Bayesian inference?  An answer in bits."""

__version__ = "0.1.0"
