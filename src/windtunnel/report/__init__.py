"""Run reports: matplotlib figures and a self-contained HTML/Markdown report of a run folder."""

from .figures import FIGURE_ORDER, calibration, entropy_curve, kl_curve, training_curves
from .html import render_report

__all__ = ["FIGURE_ORDER", "calibration", "entropy_curve", "kl_curve", "render_report", "training_curves"]
