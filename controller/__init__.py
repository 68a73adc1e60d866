"""Quartermaster: deadline-aware GPU capacity for clusters shared through Kueue and Karpenter."""

__version__ = "0.1.0"
